import florwb as flor
import torch

from train_lib import build, train_one_epoch, evaluate

model, loader, test_loader, optimizer = build(flor.arg("config", "small.yaml"))
epochs = flor.arg("epochs", 30)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs)):
        train_one_epoch(model, loader, optimizer)
        acc = evaluate(model, test_loader)
        print(f"epoch {epoch}: {acc:.3f}")
