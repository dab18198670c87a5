import florwb as flor
import torch


def evaluate(model, loader):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.size(0)
    return flor.log("val_acc", correct / total)


def main(model, loader, val_loader, optimizer):
    for epoch in flor.loop("epoch", range(10)):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        evaluate(model, val_loader)
