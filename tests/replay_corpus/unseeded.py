# Never seeds anything: data from numpy's and torch's global generators, the model's
# initial weights from torch's. Only the recorded process-start RNG states make it replay.
import math
import time

import numpy as np
import torch

import florwb as flor

flor.set_checkpoint_budget(1.0)
x = torch.from_numpy(np.random.randn(40, 5).astype("float32"))
y = torch.from_numpy(np.random.randn(40, 1).astype("float32"))
net = torch.nn.Linear(5, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
# @before flor.log("before", float(net.weight.detach().sum()) + float(x.sum()))


def batch_loss(idx):
    loss = ((net(x[idx]) - y[idx]) ** 2).mean()
    # @function flor.log("fn_loss", loss.item())
    return loss


with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        order = np.random.permutation(40)
        for step in flor.loop("step", range(2)):
            idx = torch.from_numpy(order[step * 20 : (step + 1) * 20])
            noise = torch.randn(20, 5) * 0.01
            loss = batch_loss(idx) + noise.sum() * 0
            opt.zero_grad()
            loss.backward()
            opt.step()
            # @step flor.log("step_loss", loss.item() + float(noise.sum()))
        # @epoch_end flor.log("e_end", float(net.weight.detach().norm()) + float(x.mean()))
        time.sleep(0.03)
