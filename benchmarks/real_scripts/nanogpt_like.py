# A training loop in the shape of nanoGPT's train.py, on a tiny character-level language
# model: one `for iter_num in flor.loop("iter", ...)` over iterations (nanoGPT's own is a
# `while True`), the learning rate set from a warmup/cosine schedule each iteration,
# `estimate_loss()` every eval_interval iterations, gradient accumulation over micro steps
# and the next batch prefetched at the end of the body.
# BENCH_EPOCHS (iterations) / BENCH_STEPS (eval_interval) size it; CPU, one thread.
import math
import os

import torch
from torch import nn
from torch.nn import functional as F

import florwb as flor

torch.set_num_threads(1)
torch.manual_seed(1337)
max_iters = flor.arg("max_iters", int(os.environ.get("BENCH_EPOCHS", "60")))
eval_interval = flor.arg("eval_interval", int(os.environ.get("BENCH_STEPS", "20")))
eval_iters = 10
block_size, batch_size, n_embd, vocab_size = 32, 16, 64, 65
gradient_accumulation_steps = 2
learning_rate, min_lr, warmup_iters = 1e-3, 1e-4, 10

text = torch.randint(vocab_size, (20_000,))
text[1::3] = (text[::3][: len(text[1::3])] * 7 + 3) % vocab_size  # something to learn
n = int(0.9 * len(text))
train_data, val_data = text[:n], text[n:]


def get_batch(split):
    data = train_data if split == "train" else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i : i + block_size] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.block = nn.TransformerEncoderLayer(
            n_embd, 4, 4 * n_embd, dropout=0.0, batch_first=True
        )
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.block(self.tok(idx) + self.pos(torch.arange(t)), src_mask=mask, is_causal=True)
        logits = self.head(h)
        loss = (
            None
            if targets is None
            else F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))
        )
        return logits, loss


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.1)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


X, Y = get_batch("train")
best_val_loss = 1e9
with flor.checkpointing(model=model, optimizer=optimizer):
    for iter_num in flor.loop("iter", range(max_iters)):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train {losses['train']:.4f}, val {losses['val']:.4f}")
            flor.log("val_loss", losses["val"])
            if losses["val"] < best_val_loss:
                best_val_loss = losses["val"]
        for micro_step in range(gradient_accumulation_steps):  # noqa: B007
            _, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        flor.log("train_loss", loss.item() * gradient_accumulation_steps)
print(f"best val loss {best_val_loss:.4f}")
flor.commit()
