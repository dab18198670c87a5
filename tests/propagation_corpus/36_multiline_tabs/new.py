import florwb as flor
import torch

from lib import model, optimizer, loader


def train():
    for epoch in flor.loop("epoch", range(4)):
        for x, y in flor.loop("step", loader):
            loss = model.loss(x, y)
            optimizer.zero_grad()
            loss.backward()
            flor.log(
                "grad_norms",
                [p.grad.norm().item() for p in model.parameters() if p.grad is not None],
            )
            optimizer.step()
