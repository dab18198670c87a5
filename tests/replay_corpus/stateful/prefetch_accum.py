# nanoGPT's shape: the next batch is drawn at the end of each iteration and read by the next,
# gradients accumulate over micro-steps, the loop runs over count() and leaves through
# `break` after `max_iters`, the validation loss is estimated every few iterations, and an
# iteration counter is carried across iterations.
import itertools

import torch

import florwb as flor

torch.manual_seed(1337)
block, vocab, batch, grad_accum = 8, 16, 8, 2
data = torch.randint(0, vocab, (400,))
max_iters = flor.arg("max_iters", 10)
eval_interval = 4


def get_batch():
    ix = torch.randint(len(data) - block - 1, (batch,))
    x = torch.stack([data[i : i + block] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + block] for i in ix])
    return x, y


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 16)
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, x, y):
        logits = self.head(torch.tanh(self.emb(x)))
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))


model = Tiny()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(3)
    for k in range(3):
        xb, yb = get_batch()
        losses[k] = model(xb, yb)[1].item()
    model.train()
    return losses.mean().item()


X, Y = get_batch()
local_iter = 0
# @before flor.log("first_batch", int(X.sum()))
with flor.checkpointing(model=model, optimizer=optimizer):
    for it in flor.loop("iter", itertools.count()):
        lr = 3e-3 * min(1.0, (it + 1) / 4)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % eval_interval == 0:
            flor.log("val_loss", estimate_loss())
        # @epoch_start flor.log("batch_sum", int(X.sum()) + 1000 * local_iter)
        for micro_step in flor.loop("micro", range(grad_accum)):
            half = batch // grad_accum
            rows = slice(micro_step * half, (micro_step + 1) * half)
            loss = model(X[rows], Y[rows])[1] / grad_accum
            loss.backward()
            # @step flor.log("micro_loss", loss.item())
        X, Y = get_batch()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        flor.log("loss", loss.item() * grad_accum)
        local_iter += 1
        # @epoch_end flor.log("grad_norm", norm.item())
        if it == max_iters:
            break
