import florwb as flor

from setup import model, optimizer, loader, train_step


def train(epochs):
    best = None
    for epoch in flor.loop("epoch", range(epochs)):
        loss = train_step(model, optimizer, loader)
        if best is None or loss < best:
            best = loss
        flor.log("best_loss", best)

    return best


train(10)
