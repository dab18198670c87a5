# Writes its own outputs into the project: a checkpoint file every epoch, a text log, and a
# final model after the loop (ignored by git, as users do). A replay must leave the user's
# copies as they are.
import math
import time
from pathlib import Path

import torch

import florwb as flor

torch.manual_seed(5)
flor.set_checkpoint_budget(1.0)
out = Path("out")
out.mkdir(exist_ok=True)
x, y = torch.randn(30, 3), torch.randn(30, 1)
net = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(net.parameters(), lr=0.05)
# @before flor.log("before", float(net.bias.detach().sum()))


def report(epoch_loss, epoch):
    with open(out / "log.txt", "a") as f:
        f.write(f"{epoch} {epoch_loss}\n")
    # @function flor.log("fn_report", epoch_loss)


with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        for step in flor.loop("step", range(2)):
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            report(loss.item(), epoch)
            # @step flor.log("step_loss", loss.item())
        torch.save(net.state_dict(), out / f"net_epoch_{epoch}.pt")
        torch.save(net.state_dict(), "model.pt")
        # @epoch_end flor.log("e_end", float(net.weight.detach().norm()))
        time.sleep(0.03)
torch.save(net.state_dict(), "final.pt")
