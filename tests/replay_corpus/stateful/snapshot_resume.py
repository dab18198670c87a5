# pytorch/examples' multigpu_torchrun shape on one process: resume from the script's own
# snapshot file when it exists, and write it at the end of every epoch. The run started
# without one; its replay must start without one too.
import os

import torch

import florwb as flor

SNAPSHOT = "snapshot.pt"
torch.manual_seed(17)
x, y = torch.randn(40, 3), torch.randn(40, 1)
model = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.ReLU(), torch.nn.Linear(6, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
epochs_run = 0
if os.path.exists(SNAPSHOT):
    snapshot = torch.load(SNAPSHOT)
    model.load_state_dict(snapshot["MODEL_STATE"])
    epochs_run = snapshot["EPOCHS_RUN"]
    print(f"resuming from snapshot at epoch {epochs_run}")
# @before flor.log("resume_at", epochs_run + float(model[0].weight.detach().sum()))
with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(epochs_run, flor.arg("max_epochs", 6))):
        # @epoch_start flor.log("w_start", float(model[2].weight.detach().sum()))
        for step in flor.loop("step", range(4)):
            rows = slice(step * 10, (step + 1) * 10)
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            flor.log("loss", loss.item())
            # @step flor.log("bias", float(model[2].bias.detach()))
        torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": epoch + 1}, SNAPSHOT)
        # @epoch_end flor.log("w_norm", float(model[0].weight.detach().norm()))
