"""Step-based training: one loop over optimizer steps, batches drawn from a cycling
DataLoader iterator."""
import itertools

import torch
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

TOTAL_STEPS = flor.arg("TOTAL_STEPS", 6)
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
batches = itertools.cycle(loader)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
with flor.checkpointing(model=model, optimizer=optimizer):
    for step in flor.loop("step", range(TOTAL_STEPS)):
        x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        flor.log("loss", loss)
        optimizer.step()
