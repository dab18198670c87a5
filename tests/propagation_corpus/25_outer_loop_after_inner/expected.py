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
            z = noise(real.size(0))
            fake = G(z)
            d_real = D(real)
            d_fake = D(fake.detach())
            d_loss = -(torch.log(d_real + 1e-8) + torch.log(1 - d_fake + 1e-8)).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = -torch.log(D(fake) + 1e-8).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
            d_losses.append(d_loss.item())
        flor.log("d_loss_epoch", sum(d_losses) / len(d_losses))
        print(epoch, d_losses[-1])
