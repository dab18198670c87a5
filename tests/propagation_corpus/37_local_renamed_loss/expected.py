import florwb as flor
import torch
import torch.nn.functional as F

from lib import model, optimizer, loader

for epoch in flor.loop("epoch", range(6)):
    for x, y in flor.loop("step", loader):
        logits = model(x)
        batch_loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        batch_loss.backward()
        optimizer.step()
        flor.log("loss", batch_loss.item())
        flor.log("confidence", logits.softmax(-1).max(-1).values.mean().item())
