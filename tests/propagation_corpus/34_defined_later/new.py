import florwb as flor
import torch

from common import model, optimizer, loader, test_loader, evaluate, step

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(25)):
        for batch in flor.loop("step", loader):
            step(model, optimizer, batch)
        test_acc = evaluate(model, test_loader)
        flor.log("test_acc", test_acc)
