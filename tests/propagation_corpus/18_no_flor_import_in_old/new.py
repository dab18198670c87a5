"""Train a small MLP on the iris data."""
import florwb as flor
import torch
from sklearn.datasets import load_iris

X, y = load_iris(return_X_y=True)
X, y = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
opt = torch.optim.Adam(model.parameters(), lr=0.01)

for epoch in flor.loop("epoch", range(200)):
    loss = torch.nn.functional.cross_entropy(model(X), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    flor.log("loss", loss.item())
