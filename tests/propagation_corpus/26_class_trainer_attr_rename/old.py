import florwb as flor
import torch


class Trainer:
    def __init__(self, model, loader, lr):
        self.model = model
        self.loader = loader
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)

    def train_epoch(self):
        self.model.train()
        for batch, target in self.loader:
            self.opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.model(batch), target)
            loss.backward()
            self.opt.step()
        return loss.item()

    def fit(self, epochs):
        for epoch in flor.loop("epoch", range(epochs)):
            self.train_epoch()
