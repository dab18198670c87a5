import florwb as flor
import torch

from lib import get_model, get_data


def log_weight_norm(model):
    total = sum(p.norm().item() ** 2 for p in model.parameters()) ** 0.5
    flor.log("weight_norm", total)


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
        log_weight_norm(model)
