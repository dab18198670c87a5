import florwb as flor
import torch

from lib import get_model, get_data

model = get_model("resnet18")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = get_data("imagenet-subset", batch_size=256)
val_loader = get_data("imagenet-val", batch_size=512)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(90)):
        for images, labels in flor.loop("step", loader):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for val_images, val_labels in val_loader:
                val_out = model(val_images)
                top1 = (val_out.argmax(1) == val_labels).float().mean()
                flor.log("val_top1", top1.item())
