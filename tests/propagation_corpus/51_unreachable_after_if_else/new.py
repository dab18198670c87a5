import florwb as flor
import torch


def evaluate(model, loader, quick=False):
    model.eval()
    with torch.no_grad():
        if quick:
            x, y = next(iter(loader))
            acc = (model(x).argmax(1) == y).float().mean().item()
        else:
            correct = total = 0
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
                total += y.numel()
            acc = correct / total
        flor.log("val_acc", acc)
        return acc


for epoch in flor.loop("epoch", range(10)):
    evaluate(model, val_loader, quick=epoch < 9)
