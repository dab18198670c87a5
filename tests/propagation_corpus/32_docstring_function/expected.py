import florwb as flor
import torch


def evaluate(model, loader):
    """Mean loss over `loader`."""
    flor.log("eval_batches", len(loader))
    model.eval()
    with torch.no_grad():
        losses = [model.loss(batch).item() for batch in loader]
    return sum(losses) / len(losses)
