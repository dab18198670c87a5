# Manual SGD without torch.optim: the parameters are updated in a helper called from the
# step loop; a history list defined before the main loop grows in the step loop.
import math
import time

import torch

import florwb as flor

torch.manual_seed(1)
lr = flor.arg("lr", 0.1)
flor.set_checkpoint_budget(1.0)
x, y = torch.randn(48, 6), torch.randn(48, 1)
net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
history = []
# @before flor.log("before", float(sum(p.detach().sum() for p in net.parameters())))


def sgd_update(params, step_lr):
    with torch.no_grad():
        for p in params:
            # @function flor.log("fn_gnorm", float(p.grad.norm()))
            p -= step_lr * p.grad
    return len(params)


with flor.checkpointing(model=net):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item() + len(history))
        perm = torch.randperm(48)
        for step in flor.loop("step", range(3)):
            idx = perm[step * 16 : (step + 1) * 16]

            def compute():
                out = net(x[idx])
                # @closure flor.log("in_closure", float(out.detach().mean()))
                return ((out - y[idx]) ** 2).mean()

            loss = compute()
            for p in net.parameters():
                p.grad = None
            loss.backward()
            sgd_update(list(net.parameters()), lr)
            history.append(loss.item())
            # @step flor.log("step_loss", loss.item())
        flor.log("acc", float(-((net(x) - y) ** 2).mean().detach()))
        # @epoch_end flor.log("e_end", float(net[0].weight.detach().norm()) + sum(history))
        time.sleep(0.03)
