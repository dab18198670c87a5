# Two models and two optimizers, like a GAN: a generator and a discriminator trained in
# turn every step, both registered for checkpoints.
import math
import time

import torch

import florwb as flor

torch.manual_seed(3)
flor.set_checkpoint_budget(1.0)
real = torch.randn(32, 2) * 0.5 + 1.0
gen = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
disc = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt_g = torch.optim.Adam(gen.parameters(), lr=0.01)
opt_d = torch.optim.Adam(disc.parameters(), lr=0.01)
bce = torch.nn.BCEWithLogitsLoss()
# @before flor.log("before", float(gen[0].weight.detach().sum() + disc[0].weight.detach().sum()))


def disc_loss(fake):
    loss = bce(disc(real), torch.ones(32, 1)) + bce(disc(fake.detach()), torch.zeros(32, 1))
    # @function flor.log("fn_d", loss.item())
    return loss


with flor.checkpointing(gen=gen, disc=disc, opt_g=opt_g, opt_d=opt_d):
    for epoch in flor.loop("epoch", range(3)):
        # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(gen.parameters(), math.inf).item())
        for step in flor.loop("step", range(3)):
            fake = gen(torch.randn(32, 3))
            opt_d.zero_grad()
            d_loss = disc_loss(fake)
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = bce(disc(fake), torch.ones(32, 1))
            g_loss.backward()
            opt_g.step()
            # @step flor.log("step_g", g_loss.item())
        flor.log("d_loss", d_loss.item())
        # @epoch_end flor.log("e_end", float(sum(p.grad.norm() for p in disc.parameters())))
        time.sleep(0.03)
