import florwb as flor
import torch.nn.functional as F


def train_epoch(model, loader, optimizer):
    model.train()
    try:
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        avg = total / len(loader)
        flor.log("avg_loss", avg)
    except KeyboardInterrupt:
        print("interrupted, keeping what we have")
        avg = float("nan")
    return avg


for epoch in flor.loop("epoch", range(20)):
    train_epoch(model, loader, optimizer)
