"""Training split into helpers: the batch loop lives in train_one_epoch(), called from
main()'s epoch loop, and the arguments come from get_args()."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--gamma", type=float, default=0.5)
    return p.parse_args()


def train_one_epoch(model, loader, optimizer, loss_fn):
    model.train()
    total = 0.0
    for inputs, targets in flor.loop("step", loader):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        flor.log("loss", loss)
        optimizer.step()
        total += loss.item()
    return total / len(loader)


@torch.no_grad()
def evaluate(model, loader, loss_fn):
    model.eval()
    return sum(loss_fn(model(x), y).item() for x, y in loader) / len(loader)


def main():
    args = get_args()
    args.epochs = flor.arg("epochs", args.epochs)
    args.lr = flor.arg("lr", args.lr)
    args.gamma = flor.arg("gamma", args.gamma)
    torch.manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(30, 3), torch.randn(30, 1)), batch_size=10)
    valid = DataLoader(TensorDataset(torch.randn(10, 3), torch.randn(10, 1)), batch_size=10)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=args.gamma)
    loss_fn = nn.MSELoss()
    with flor.checkpointing(model=model, optimizer=optimizer, scheduler=scheduler):
        for epoch in flor.loop("epoch", range(args.epochs)):
            train_loss = train_one_epoch(model, train, optimizer, loss_fn)
            scheduler.step()
            print(epoch, round(train_loss, 4), round(evaluate(model, valid, loss_fn), 4))


if __name__ == "__main__":
    main()
