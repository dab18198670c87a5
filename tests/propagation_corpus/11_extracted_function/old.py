import florwb as flor
import torch
import torch.nn.functional as F

from vae import VAE
from data import mnist_loader

model = VAE(latent=20)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = mnist_loader(batch_size=128)

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(30)):
        total = 0.0
        for x, _ in flor.loop("step", loader):
            recon, mu, logvar = model(x)
            rec = F.binary_cross_entropy(recon, x, reduction="sum")
            kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
            loss = rec + kld
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        flor.log("loss", total / len(loader.dataset))
