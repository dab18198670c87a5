"""A language model whose architecture is chosen on the command line: the model is bound
in both branches of an if/else, trained one bptt window at a time in train()."""
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description="tiny word-level language model")
parser.add_argument("--model", type=str, default="LSTM", help="LSTM or Transformer")
parser.add_argument("--emsize", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--bptt", type=int, default=5)
args = parser.parse_args()

torch.manual_seed(1)
ntokens = 12
train_data = torch.randint(0, ntokens, (31, 2))


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, ninp)
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        output, _ = self.rnn(self.encoder(src))
        return torch.log_softmax(self.decoder(output), dim=-1)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead=2, dim_feedforward=16, dropout=0.0)
        self.transformer = nn.TransformerEncoder(layer, num_layers=1)
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        return torch.log_softmax(self.decoder(self.transformer(self.encoder(src))), dim=-1)


if args.model == "Transformer":
    model = TransformerModel(ntokens, args.emsize)
else:
    model = RNNModel(ntokens, args.emsize)
criterion = nn.NLLLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def train():
    model.train()
    total_loss = 0.0
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output.view(-1, ntokens), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        total_loss += loss.item()
    return total_loss / (batch + 1)


for epoch in range(1, args.epochs + 1):
    train_loss = train()
    print(f"| epoch {epoch:3d} | train ppl {math.exp(train_loss):8.2f}")
