"""A small classifier on synthetic data, recorded with florwb.

v2: momentum, a held-out split, and the model renamed.
"""

import torch
from torch import nn

import florwb as flor

torch.manual_seed(0)
lr = flor.arg("lr", 0.1)
epochs = flor.arg("epochs", 5)
batch_size = flor.arg("batch_size", 32)
momentum = flor.arg("momentum", 0.9)

features = torch.randn(1280, 16)
labels = (features[:, :4].sum(dim=1) > 0).long()
train_x, test_x = features[:1024], features[1024:]
train_y, test_y = labels[:1024], labels[1024:]
batches = list(zip(train_x.split(batch_size), train_y.split(batch_size)))

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
loss_fn = nn.CrossEntropyLoss()


def evaluate(model):
    with torch.no_grad():
        return (model(test_x).argmax(dim=1) == test_y).float().mean().item()


with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        flor.log(
            "weight_norm",
            torch.cat([p.detach().flatten() for p in model.parameters()]).norm().item(),
        )
        for x, y in flor.loop("step", batches):
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            flor.log("loss", loss.item())
        flor.log("acc", evaluate(model))

flor.commit()
