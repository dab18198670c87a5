import florwb as flor
import torch

from lib import model, optimizer, train_loader, val_loader

for epoch in flor.loop("epoch", range(10)):
    model.train()
    for x, y in flor.loop("step", train_loader):
        loss = model.loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())
    model.eval()
    with torch.no_grad():
        val = sum(model.loss(x, y).item() for x, y in val_loader) / len(val_loader)
