# A script that keeps its own checkpoints: `torch.save(model.state_dict())` every epoch while
# training with Adam, whose moments are saved nowhere; no flor.checkpointing at all.
import torch

import florwb as flor

torch.manual_seed(11)
x, y = torch.randn(48, 4), torch.randn(48, 1)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
# @before flor.log("w_first", float(model[0].weight.detach().sum()))
for epoch in flor.loop("epoch", range(flor.arg("epochs", 6))):
    perm = torch.randperm(48)
    # @epoch_start flor.log("w_start", float(model[2].weight.detach().sum()))
    for step in flor.loop("step", range(4)):
        idx = perm[step * 12 : (step + 1) * 12]
        loss = ((model(x[idx]) - y[idx]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())
        # @step flor.log("out0", float(model(x[:1]).detach()))
    torch.save(model.state_dict(), "model.pt")
    # @epoch_end flor.log("w_norm", float(model[0].weight.detach().norm()))
