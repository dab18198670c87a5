import florwb as flor
import torch


def fit(model, train, validate, epochs, track=True):
    best = 0.0
    for epoch in flor.loop("epoch", range(epochs)):
        train(model)
        val_acc = validate(model)
        if epoch % 5 == 0:
            if track:
                if val_acc > best:
                    best = val_acc
                    print(f"new best {best:.3f}")
                flor.log("best_acc", best)
    return best
