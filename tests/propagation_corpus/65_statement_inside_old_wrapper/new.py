import florwb as flor
import torch


def fit(model, train, validate, epochs):
    best_acc = 0.0
    for epoch in flor.loop("epoch", range(epochs)):
        train(model)
        val_acc = validate(model)
        if epoch % 5 == 0:
            if val_acc > best_acc:
                best_acc = val_acc
                print(f"new best {best_acc:.3f}")
            flor.log("best_acc", best_acc)
    return best_acc
