# Batches come from a hand-written generator, not a DataLoader.
# This script uses single quotes and two-space indentation.
import random

import torch
import florwb as flor

steps_per_epoch = flor.arg('steps_per_epoch', 5)
epochs = flor.arg('epochs', 2)
noise = flor.arg('noise', 0.05)


def batches(n, batch_size=8):
  """Yield n batches of a noisy linear function."""
  for _ in range(n):
    x = torch.rand(batch_size, 2)
    y = x.sum(1, keepdim=True) + noise * torch.randn(batch_size, 1)
    yield x, y


random.seed(0)
torch.manual_seed(0)
layer = torch.nn.Linear(2, 1)
optim = torch.optim.RMSprop(layer.parameters(), lr=0.01)

with flor.checkpointing(model=layer, optimizer=optim):
  for epoch in flor.loop('epoch', range(epochs)):
    for x, y in flor.loop('step', batches(steps_per_epoch)):
      loss = torch.nn.functional.l1_loss(layer(x), y)
      optim.zero_grad()
      loss.backward()
      flor.log('loss', loss)
      optim.step()
    print('epoch', epoch, 'loss', round(loss.item(), 4))
