# A class-based trainer: the loops live in methods (fit -> train_epoch -> train_step), the
# registered objects are attributes of self, and the trainer counts the steps it ran.
import math
import time

import torch

import florwb as flor


class Trainer:
    def __init__(self, lr):
        torch.manual_seed(7)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr, momentum=0.5)
        self.x, self.y = torch.randn(36, 4), torch.randn(36, 1)
        self.steps_done = 0

    def train_step(self, idx):
        loss = ((self.net(self.x[idx]) - self.y[idx]) ** 2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.steps_done += 1
        # @function flor.log("fn_loss", loss.item())
        return loss

    def train_epoch(self):
        perm = torch.randperm(36)
        for step in flor.loop("step", range(3)):
            loss = self.train_step(perm[step * 12 : (step + 1) * 12])
            # @step flor.log("step_loss", loss.item())
        return loss

    def fit(self, epochs):
        # @before flor.log("before", float(self.net[0].weight.detach().sum()))
        with flor.checkpointing(model=self.net, optimizer=self.opt):
            for epoch in flor.loop("epoch", range(epochs)):
                # @epoch_start flor.log("e_start", torch.nn.utils.clip_grad_norm_(self.net.parameters(), math.inf).item() + self.steps_done)
                self.train_epoch()
                # @epoch_end flor.log("e_end", float(self.net[2].weight.detach().norm()))
                time.sleep(0.03)


flor.set_checkpoint_budget(1.0)
Trainer(flor.arg("lr", 0.05)).fit(flor.arg("epochs", 3))
