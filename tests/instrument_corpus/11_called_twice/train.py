"""Pretraining then fine-tuning through the same train() function: refused, one run
would enter the epoch loop twice."""
import torch


def train(model, epochs, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for _ in range(3):
            loss = model(torch.randn(4, 2)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


model = torch.nn.Linear(2, 1)
train(model, epochs=2, lr=0.1)
train(model, epochs=1, lr=0.01)
