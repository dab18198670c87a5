import florwb as flor
import torch

from lib import model, optimizer, loader

for epoch in flor.loop("epoch", range(10)):
    for x, y in flor.loop("step", loader):
        loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
