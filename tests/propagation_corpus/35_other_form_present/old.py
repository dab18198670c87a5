import florwb as flor
import torch

from lib import model, optimizer, loader, criterion

for epoch in flor.loop("epoch", range(8)):
    for x, y in flor.loop("step", loader):
        loss = flor.log("loss", criterion(model(x), y))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
