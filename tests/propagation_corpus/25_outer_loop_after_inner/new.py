import florwb as flor
import torch
import torch.nn.functional as F

from gan import G, D, noise, real_batches

opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))

with flor.checkpointing(G=G, D=D, opt_g=opt_g, opt_d=opt_d):
    for epoch in flor.loop("epoch", range(100)):
        d_losses = []
        for real in flor.loop("step", real_batches()):
            fake = G(noise(real.size(0)))
            d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = F.softplus(-D(fake)).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            d_losses.append(d_loss.item())
        flor.log("d_loss_epoch", sum(d_losses) / len(d_losses))
