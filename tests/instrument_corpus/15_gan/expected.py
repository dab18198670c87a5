"""A toy GAN: two models, two optimizers, both registered under their own names."""
import torch
from torch import nn
import florwb as flor

latent = flor.arg("latent", 4)
n_epochs = flor.arg("n_epochs", 2)
batches_per_epoch = flor.arg("batches_per_epoch", 3)

netG = nn.Sequential(nn.Linear(latent, 8), nn.ReLU(), nn.Linear(8, 2))
netD = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()

with flor.checkpointing(netG=netG, netD=netD, optG=optG, optD=optD):
    for epoch in flor.loop("epoch", range(n_epochs)):
        for _ in flor.loop("step", range(batches_per_epoch)):
            real = torch.randn(8, 2) * 0.5 + 1.0
            fake = netG(torch.randn(8, latent))
            # discriminator
            optD.zero_grad()
            lossD = bce(netD(real), torch.ones(8, 1)) + bce(netD(fake.detach()), torch.zeros(8, 1))
            lossD.backward()
            flor.log("lossD", lossD)
            optD.step()
            # generator
            optG.zero_grad()
            lossG = bce(netD(fake), torch.ones(8, 1))
            lossG.backward()
            flor.log("lossG", lossG)
            optG.step()
        print(f"epoch {epoch}: D {lossD.item():.3f} G {lossG.item():.3f}")
