"""Mixed precision: autocast to bfloat16 with a GradScaler (CPU here, CUDA in real life)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

device = flor.arg("device", "cpu")
epochs = flor.arg("epochs", 2)
lr = flor.arg("lr", 3e-3)
use_amp = flor.arg("use_amp", True)

dataset = TensorDataset(torch.randn(48, 12), torch.randint(0, 3, (48,)))
loader = DataLoader(dataset, batch_size=12, shuffle=True)
model = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 3)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
scaler = torch.amp.GradScaler(device, enabled=use_amp)
loss_fn = nn.CrossEntropyLoss()

with flor.checkpointing(model=model, optimizer=optimizer, scaler=scaler):
    for epoch in flor.loop("epoch", range(epochs)):
        for inputs, targets in flor.loop("step", loader):
            inputs, targets = inputs.to(device), targets.to(device)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_amp):
                output = model(inputs)
                loss = loss_fn(output, targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            flor.log("loss", loss)
            scaler.step(optimizer)
            scaler.update()
        print(f"epoch {epoch} loss {loss.item():.4f} scale {scaler.get_scale()}")
