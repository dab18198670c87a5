import florwb as flor
import torch

from lib import model, optimizer, loader

for epoch in flor.loop("epoch", range(5)):
    for x, y in flor.loop("step", loader):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        flor.log("loss", loss.item())
        flor.log("logit_mean", out.mean().item())
        flor.log("grad_fc", model.fc.weight.grad.abs().max().item())
        optimizer.step()
