"""A while loop with an `else:` clause: refused (the `else` runs when the condition fails,
which a for loop over flor.loop cannot say)."""
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
else:
    print("done")
