import florwb as flor

from setup import model, optimizer, loader, train_step


def train(epochs):
    best = None
    for epoch in flor.loop("epoch", range(epochs)):
        loss = train_step(model, optimizer, loader)
        if best is None or loss < best:
            best = loss

            # a checkpoint used to be written here

    return best


train(10)
