import florwb as flor
import torch

from lib import model, optimizer, loader, train_one_epoch, validate

for epoch in flor.loop("epoch", range(flor.arg("epochs", 20))):
    train_one_epoch(model, optimizer, loader)
    print("val", validate(model))
