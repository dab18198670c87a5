#!/usr/bin/env python3
# A regression model trained inside main(), the most common script layout.
import math

import torch
from torch import nn
import florwb as flor

SEED = flor.arg("SEED", 7)


def make_data(n, dim):
    x = torch.randn(n, dim)
    w = torch.arange(dim, dtype=torch.float32)
    return x, x @ w + 0.1 * torch.randn(n)


def main():
    torch.manual_seed(SEED)
    epochs, steps, dim = 3, 4, 8   # locals: not hyperparameters florwb can see
    x, y = make_data(64, dim)
    model = nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 1))
    model = model.to("cpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with flor.checkpointing(model=model, optimizer=opt):
        for epoch in flor.loop("epoch", range(epochs)):
            for step in flor.loop("step", range(steps)):
                idx = torch.randint(0, len(x), (16,))
                pred = model(x[idx]).squeeze(1)
                loss = nn.functional.mse_loss(pred, y[idx])
                opt.zero_grad()
                loss.backward()
                flor.log("loss", loss)
                opt.step()
            print(f"epoch {epoch}: rmse {math.sqrt(loss.item()):.3f}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
