import florwb as flor
import torch
import torch.nn.functional as F

from setup import model, optimizer, train_loader, val_loader

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 10))):
        model.train()
        for x, y in flor.loop("step", train_loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            flor.log("train_loss", loss.item())
        model.eval()
        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                val_loss += F.cross_entropy(model(x), y).item()
        flor.log("val_loss", val_loss / len(val_loader))
