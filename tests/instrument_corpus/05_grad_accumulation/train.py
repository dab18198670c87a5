"""Gradient accumulation: one optimizer step every ACCUM_STEPS micro-batches."""
import torch
from torch.utils.data import DataLoader, TensorDataset

ACCUM_STEPS = 2
MICRO_BATCH = 4
EPOCHS = 2
LR = 0.1

torch.manual_seed(1)
data = TensorDataset(torch.randn(32, 6), torch.randn(32, 1))
loader = DataLoader(data, batch_size=MICRO_BATCH)
model = torch.nn.Linear(6, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.5)

for epoch in range(EPOCHS):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM_STEPS
        loss.backward()  # gradients add up until the next step
        if (step + 1) % ACCUM_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    print(epoch, loss.item() * ACCUM_STEPS)
