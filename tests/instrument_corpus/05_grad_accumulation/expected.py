"""Gradient accumulation: one optimizer step every ACCUM_STEPS micro-batches."""
import torch
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

ACCUM_STEPS = flor.arg("ACCUM_STEPS", 2)
MICRO_BATCH = flor.arg("MICRO_BATCH", 4)
EPOCHS = flor.arg("EPOCHS", 2)
LR = flor.arg("LR", 0.1)

torch.manual_seed(1)
data = TensorDataset(torch.randn(32, 6), torch.randn(32, 1))
loader = DataLoader(data, batch_size=MICRO_BATCH)
model = torch.nn.Linear(6, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.5)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(EPOCHS)):
        optimizer.zero_grad()
        for step, (x, y) in enumerate(flor.loop("step", loader)):
            loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM_STEPS
            loss.backward()  # gradients add up until the next step
            flor.log("loss", loss)
            if (step + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(epoch, loss.item() * ACCUM_STEPS)
