import florwb as flor
import torch
import torch.nn.functional as F

from model import ResNet
from data import get_loaders

train_loader, test_loader = get_loaders(batch_size=128)
model = ResNet(depth=18).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)

with flor.checkpointing(model=model, optimizer=optimizer, scheduler=scheduler):
    for epoch in flor.loop("epoch", range(200)):
        scheduler.step()
        flor.log("lr", scheduler.get_last_lr()[0])
        model.train()
        for inputs, targets in flor.loop("step", train_loader):
            optimizer.zero_grad()
            inputs, targets = inputs.cuda(), targets.cuda()
            outputs = model(inputs)
            loss = F.cross_entropy(outputs, targets)
            loss.backward()
            optimizer.step()
            flor.log("loss", loss.item())
