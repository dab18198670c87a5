import florwb as flor
import torch
from torch.utils.data import DataLoader

from dataset import CIFAR10
from models import WideResNet

lr = flor.arg("lr", 0.1)
weight_decay = flor.arg("wd", 1e-4)
epochs = flor.arg("epochs", 200)

model = WideResNet(depth=16, widen=8)
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
loader = DataLoader(CIFAR10("train"), batch_size=128, shuffle=True, num_workers=4)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        for x, y in flor.loop("step", loader):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
