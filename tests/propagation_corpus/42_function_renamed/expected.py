import florwb as flor
import torch


def fit(model, loader, optimizer, epochs):
    for epoch in flor.loop("epoch", range(epochs)):
        for x, y in flor.loop("step", loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        flor.log("last_loss", loss.item())


if __name__ == "__main__":
    from setup import model, loader, optimizer

    fit(model, loader, optimizer, epochs=flor.arg("epochs", 5))
