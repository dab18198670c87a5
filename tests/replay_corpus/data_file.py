# Reads a tracked data file over 2 MiB that changes between versions (all 1.0, then all
# 2.0): the replay of the v1 run must read the run's bytes (git still holds them), so
# every value equals a forward run of today's script on the v1 file.
# files: _data_files
import math
import time

import numpy as np
import torch

import florwb as flor

torch.manual_seed(8)
flor.set_checkpoint_budget(1.0)
raw = torch.from_numpy(np.load("data.npy")[:400].astype("float32")).reshape(100, 4)
x, y = raw * torch.randn(100, 4), torch.randn(100, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
# @before flor.log("before", float(raw.sum()))


def loss_of(idx):
    loss = ((net(x[idx]) - y[idx]) ** 2).mean()
    # @function flor.log("fn_loss", loss.item())
    return loss


with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        for step in flor.loop("step", range(2)):
            loss = loss_of(torch.arange(step * 50, (step + 1) * 50))
            opt.zero_grad()
            loss.backward()
            opt.step()
            # @step flor.log("step_loss", loss.item())
        # @epoch_end flor.log("e_end", float(net.weight.detach().norm()) + float(raw.mean()))
        time.sleep(0.03)
