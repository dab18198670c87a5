"""Step-based training with a while loop: becomes a for loop over flor.loop."""
import torch

max_steps = 20
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while step < max_steps:
    x = torch.randn(4, 2)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
