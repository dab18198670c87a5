import florwb as flor
import torch


def run(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())
