import florwb as flor
import torch
import torch.nn as nn

from lm import TinyLM, batches


def train(model, optimizer, data, epochs):
    with flor.checkpointing(model=model, optimizer=optimizer):
        for epoch in flor.loop("epoch", range(epochs)):
            for tokens in flor.loop("step", batches(data, 32)):
                logits = model(tokens[:, :-1])
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                flor.log("ppl", loss.exp().item())


if __name__ == "__main__":
    data = torch.load("corpus.pt")
    model = TinyLM(vocab=5000, dim=256)
    optimizer = torch.optim.Adam(model.parameters(), lr=flor.arg("lr", 5e-4))
    train(model, optimizer, data, flor.arg("epochs", 3))
