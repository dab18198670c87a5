import florwb as flor
import torch.nn.functional as F


def train_epoch(model, loader, optimizer):
    model.train()
    for x, y in flor.loop("step", loader):
        optimizer.zero_grad()
        batch_loss = F.cross_entropy(model(x), y)
        batch_loss.backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        loss = F.cross_entropy(model(x), y, reduction="sum")
        total += loss.item()
    loss = total / len(loader.dataset)
    return loss


for epoch in flor.loop("epoch", range(10)):
    train_epoch(model, train_loader, optimizer)
    print(epoch, evaluate(model, val_loader))
