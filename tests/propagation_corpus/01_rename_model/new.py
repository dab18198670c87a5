import florwb as flor
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from data import make_dataset

net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.Adam(net.parameters(), lr=flor.arg("lr", 1e-3))
criterion = nn.CrossEntropyLoss()
loader = DataLoader(make_dataset("train"), batch_size=64, shuffle=True)

with flor.checkpointing(model=net, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 5))):
        for x, y in flor.loop("step", loader):
            optimizer.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            flor.log("grad_norm", net[0].weight.grad.norm().item())
            optimizer.step()
        flor.log("weight_norm", net[0].weight.norm().item())

flor.commit()
