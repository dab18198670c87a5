import florwb as flor
import torch

from common import model, optimizer, loader, test_loader, evaluate, step

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(25)):
        for batch in flor.loop("step", loader):
            step(model, optimizer, batch)
        acc = evaluate(model, test_loader)
        print("epoch", epoch, "acc", acc)
flor.log("final_acc", acc)

torch.save(model.state_dict(), "model.pt")
