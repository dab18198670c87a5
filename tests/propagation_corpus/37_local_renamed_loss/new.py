import florwb as flor
import torch
import torch.nn.functional as F

from lib import model, optimizer, loader

for epoch in flor.loop("epoch", range(6)):
    for x, y in flor.loop("step", loader):
        out = model(x)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())
        flor.log("confidence", out.softmax(-1).max(-1).values.mean().item())
