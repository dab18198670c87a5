# Draws its own seed after argparse when none is given (`--seed` defaults to None), as
# dcgan does with `opt.manualSeed = random.randint(...)`.
import math
import argparse
import random
import time

import torch

import florwb as flor

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--epochs", type=int, default=3)
opt_args = parser.parse_args()
if opt_args.seed is None:
    opt_args.seed = random.randint(1, 10000)
torch.manual_seed(opt_args.seed)
random.seed(opt_args.seed)
flor.set_checkpoint_budget(1.0)
x, y = torch.randn(30, 4), torch.randn(30, 1)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
# @before flor.log("before", opt_args.seed)


def shuffled():
    idx = list(range(30))
    random.shuffle(idx)
    # @function flor.log("fn_first", idx[0])
    return torch.tensor(idx)


with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(opt_args.epochs)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(net.parameters(), math.inf).item())
        for step in flor.loop("step", range(2)):
            idx = shuffled()[:15]
            loss = ((net(x[idx]) - y[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            # @step flor.log("step_loss", loss.item())
        # @epoch_end flor.log("e_end", float(net.weight.detach().norm()) + opt_args.seed)
        time.sleep(0.03)
