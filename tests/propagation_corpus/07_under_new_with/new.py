import florwb as flor
import torch

from models import Classifier
from data import train_loader, val_loader

model = Classifier()
optimizer = torch.optim.Adam(model.parameters())


def evaluate(model, loader):
    correct = total = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    return correct / total


with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(20)):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_acc = evaluate(model, val_loader)
            flor.log("val_acc", val_acc)
