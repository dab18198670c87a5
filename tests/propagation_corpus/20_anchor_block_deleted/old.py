import florwb as flor
import torch

from lib import get_model, get_data

model = get_model("resnet18")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = get_data("imagenet-subset", batch_size=256)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(90)):
        for images, labels in flor.loop("step", loader):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
