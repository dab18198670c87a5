# LBFGS with a closure passed to opt.step (the optimizer calls it several times per step),
# as in time-sequence prediction; a loss helper at module level called from the closure
# and from the epoch body: a statement in it runs in two loops, which replay refuses.
# expect: function refused: whose call sites florwb cannot follow
import math
import time

import torch

import florwb as flor

torch.manual_seed(2)
steps = flor.arg("steps", 2)
flor.set_checkpoint_budget(1.0)
x = torch.linspace(0, 3, 40).unsqueeze(1)
y = torch.sin(x)
net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.LBFGS(net.parameters(), lr=0.5, max_iter=3)
# @before flor.log("before", float(net[0].weight.detach().sum()))


def mse(pred, target):
    value = ((pred - target) ** 2).mean()
    # @function flor.log("fn_mse", value.item())
    return value


with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        for step in flor.loop("step", range(steps)):

            def closure():
                opt.zero_grad()
                loss = mse(net(x), y)
                # @closure flor.log("closure_loss", loss.item())
                loss.backward()
                return loss

            loss = opt.step(closure)
            # @step flor.log("step_loss", float(loss))
        flor.log("fit", float(mse(net(x), y).detach()))
        # @epoch_end flor.log("e_end", float(net[2].weight.detach().norm()))
        time.sleep(0.03)
