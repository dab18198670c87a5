"""A toy GAN: two models, two optimizers, both registered under their own names."""
import torch
from torch import nn

latent = 4
n_epochs = 2
batches_per_epoch = 3

netG = nn.Sequential(nn.Linear(latent, 8), nn.ReLU(), nn.Linear(8, 2))
netD = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()

for epoch in range(n_epochs):
    for _ in range(batches_per_epoch):
        real = torch.randn(8, 2) * 0.5 + 1.0
        fake = netG(torch.randn(8, latent))
        # discriminator
        optD.zero_grad()
        lossD = bce(netD(real), torch.ones(8, 1)) + bce(netD(fake.detach()), torch.zeros(8, 1))
        lossD.backward()
        optD.step()
        # generator
        optG.zero_grad()
        lossG = bce(netD(fake), torch.ones(8, 1))
        lossG.backward()
        optG.step()
    print(f"epoch {epoch}: D {lossD.item():.3f} G {lossG.item():.3f}")
