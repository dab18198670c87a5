import florwb as flor
import torch

from lib import model, optimizer, loader, train_one_epoch, validate

for epoch in flor.loop("epoch", range(flor.arg("epochs", 20))):
    flor.log("train_loss", train_one_epoch(model, optimizer, loader))
    flor.log("val_loss", validate(model))
