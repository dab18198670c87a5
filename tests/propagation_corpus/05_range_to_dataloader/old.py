import florwb as flor
import torch

X = torch.load("features.pt")
Y = torch.load("labels.pt")
model = torch.nn.Linear(X.shape[1], 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
bs = flor.arg("bs", 256)

with flor.checkpointing(model=model, opt=opt):
    for epoch in flor.loop("epoch", range(50)):
        epoch_loss = 0.0
        perm = torch.randperm(len(X))
        for i in range(0, len(X), bs):
            xb, yb = X[perm[i : i + bs]], Y[perm[i : i + bs]]
            pred = model(xb).squeeze(-1)
            loss = torch.nn.functional.mse_loss(pred, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            epoch_loss += loss.item() * len(xb)
        flor.log("epoch_loss", epoch_loss / len(X))
