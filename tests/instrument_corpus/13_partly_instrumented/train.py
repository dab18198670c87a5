"""Written for florwb by hand, halfway: the epoch loop is there, checkpointing is not."""
import torch

import florwb as flor

lr = flor.arg("lr", 0.02)
epochs = 2
model = torch.nn.Linear(2, 2)
opt = torch.optim.Adam(model.parameters(), lr=lr)

for epoch in flor.loop("epoch", range(epochs)):
    for x in torch.randn(3, 4, 2):
        loss = model(x).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
