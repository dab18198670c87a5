"""A small classifier on synthetic data, recorded with florwb."""

import torch
from torch import nn

import florwb as flor

torch.manual_seed(0)
lr = flor.arg("lr", 0.1)
epochs = flor.arg("epochs", 5)
batch_size = flor.arg("batch_size", 32)

features = torch.randn(1024, 16)
labels = (features[:, :4].sum(dim=1) > 0).long()
batches = list(zip(features.split(batch_size), labels.split(batch_size)))

net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(net.parameters(), lr=lr)
loss_fn = nn.CrossEntropyLoss()

with flor.checkpointing(model=net, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        for x, y in flor.loop("step", batches):
            loss = loss_fn(net(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            flor.log("loss", loss.item())
        with torch.no_grad():
            acc = (net(features).argmax(dim=1) == labels).float().mean().item()
        flor.log("acc", acc)

flor.commit()
