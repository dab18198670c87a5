# An epoch/step loop in the shape of the PyTorch tutorials: a shuffling DataLoader, a running
# loss summed over the step loop and printed as `running_loss / len(loader)` after it.
# BENCH_EPOCHS / BENCH_STEPS size it; CPU, one thread, fixed seeds, no downloads.
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import florwb as flor

torch.set_num_threads(1)
torch.manual_seed(0)
epochs = flor.arg("epochs", int(os.environ.get("BENCH_EPOCHS", "3")))
steps = flor.arg("steps", int(os.environ.get("BENCH_STEPS", "100")))
batch_size = 64

teacher = torch.randn(32, 10)
inputs_all = torch.randn(steps * batch_size, 32)
labels_all = (inputs_all @ teacher).argmax(dim=1)
loader = DataLoader(TensorDataset(inputs_all, labels_all), batch_size=batch_size, shuffle=True)

model = nn.Sequential(
    nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
)
optimizer = torch.optim.SGD(model.parameters(), lr=flor.arg("lr", 0.05), momentum=0.9)
criterion = nn.CrossEntropyLoss()

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        model.train()
        running_loss = 0.0
        for i, (inputs, labels) in flor.loop("step", enumerate(loader)):  # noqa: B007
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            flor.log("loss", loss.item())
        print(f"[epoch {epoch + 1}] loss: {running_loss / len(loader):.4f}")
print("Finished Training")
flor.commit()
