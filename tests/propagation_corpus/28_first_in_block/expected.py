import florwb as flor
import torch

from recsys import MF, interactions

model = MF(n_users=10000, n_items=5000, dim=32)
optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=1e-3)

for epoch in flor.loop("epoch", range(flor.arg("epochs", 10))):
    flor.log("lr", optimizer.param_groups[0]["lr"])
    # one pass over all interactions
    for users, items, ratings in flor.loop("step", interactions(batch_size=4096)):
        pred = model(users, items)
        loss = ((pred - ratings) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
