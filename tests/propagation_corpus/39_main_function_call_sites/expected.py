import florwb as flor
import torch


def log_activations(model, x):
    h = model.encoder(x)
    flor.log("act_mean", h.mean().item())
    return h


def main():
    from lib import model, optimizer, loader

    for epoch in flor.loop("epoch", range(3)):
        for x in flor.loop("step", loader):
            h = log_activations(model, x)
            loss = model.decoder(h).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
