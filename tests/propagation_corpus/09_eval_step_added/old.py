import florwb as flor
import torch
import torch.nn.functional as F

from setup import model, optimizer, train_loader, val_loader

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 10))):
        model.train()
        for x, y in flor.loop("step", train_loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
