"""Hyperparameters from the command line with argparse."""
import argparse

import torch
import torch.nn as nn
import florwb as flor

parser = argparse.ArgumentParser(description="argparse-driven training")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("-b", "--batch-size", type=int, default=8, dest="batch_size")
parser.add_argument("--hidden", type=int, default=16)
parser.add_argument("--no-bias", action="store_true")
parser.add_argument("--version", action="version", version="1.0")
args = parser.parse_args()
args.lr = flor.arg("lr", args.lr)
args.epochs = flor.arg("epochs", args.epochs)
args.batch_size = flor.arg("batch_size", args.batch_size)
args.hidden = flor.arg("hidden", args.hidden)
args.no_bias = flor.arg("no_bias", args.no_bias)

torch.manual_seed(0)
x = torch.randn(32, 5)
y = (x[:, 0] > 0).long()
model = nn.Sequential(
    nn.Linear(5, args.hidden, bias=not args.no_bias),
    nn.ReLU(),
    nn.Linear(args.hidden, 2),
)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)

with flor.checkpointing(model=model, optimizer=opt):
    for epoch in flor.loop("epoch", range(args.epochs)):
        perm = torch.randperm(len(x))
        for start in flor.loop("step", range(0, len(x), args.batch_size)):
            idx = perm[start:start + args.batch_size]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            flor.log("loss", loss)
            opt.step()
        print(f"epoch={epoch} loss={loss.item():.4f}")
