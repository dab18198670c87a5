import florwb as flor
import torch


class Trainer:
    def __init__(self, net, loader, lr):
        self.net = net
        self.loader = loader
        self.opt = torch.optim.Adam(net.parameters(), lr=lr)

    def train_epoch(self):
        self.net.train()
        for batch, target in self.loader:
            self.opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.net(batch), target)
            loss.backward()
            self.opt.step()
            flor.log("out_weight_norm", self.net.out.weight.norm().item())
        return loss.item()

    def fit(self, epochs):
        for epoch in flor.loop("epoch", range(epochs)):
            flor.log("train_loss", self.train_epoch())
