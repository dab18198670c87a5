import florwb as flor
import torch
from torch.utils.data import DataLoader

from dataset import CIFAR10
from models import WideResNet

lr = flor.arg("lr", 0.05)
weight_decay = flor.arg("wd", 5e-4)
epochs = flor.arg("epochs", 100)

model = WideResNet(depth=28, widen=10)
optimizer = torch.optim.SGD(
    model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay, nesterov=True
)
flor.log("num_params", sum(p.numel() for p in model.parameters()))
loader = DataLoader(
    CIFAR10("train"), batch_size=flor.log("batch_size", 256), shuffle=True, num_workers=8
)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        for x, y in flor.loop("step", loader):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
