"""Step-based training with a while loop: becomes a for loop over flor.loop."""
import torch
import florwb as flor

max_steps = flor.arg("max_steps", 20)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
with flor.checkpointing(model=model, optimizer=opt):
    for _florwb_iteration in flor.loop("step", iter(lambda: step < max_steps, False)):
        x = torch.randn(4, 2)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        flor.log("loss", loss)
        opt.step()
        step += 1
