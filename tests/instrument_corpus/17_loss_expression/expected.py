"""A tiny autoencoder whose loss is a sum written into the backward call: no variable
holds it, so there is nothing to log it under."""
import torch
from torch import nn
import florwb as flor

epochs = flor.arg("epochs", 2)
data = torch.randn(24, 6)
encoder = nn.Linear(6, 2)
decoder = nn.Linear(2, 6)
params = list(encoder.parameters()) + list(decoder.parameters())
opt = torch.optim.Adam(params, lr=1e-2)

with flor.checkpointing(encoder=encoder, decoder=decoder, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        for chunk in flor.loop("step", data.split(8)):
            code = encoder(chunk)
            recon = nn.functional.mse_loss(decoder(code), chunk)
            penalty = code.pow(2).mean()
            opt.zero_grad()
            (recon + 0.1 * penalty).backward()
            opt.step()
        print(epoch, recon.item())
