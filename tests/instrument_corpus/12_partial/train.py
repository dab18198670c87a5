"""An epoch loop whose batches are drained by a while loop: both are instrumented (the
while loop as a for loop over flor.loop); a global counter is left as it is and reported."""
import torch

EPOCHS = 2
log_every = 1
seen = 0  # a global counter, not a hyperparameter

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)


def count(n):
    global seen
    seen += n


for epoch in range(EPOCHS):
    batches = iter(torch.randn(4, 5, 3))
    batch = next(batches, None)
    while batch is not None:
        loss = model(batch).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        count(len(batch))
        batch = next(batches, None)
    if epoch % log_every == 0:
        print(epoch, seen, loss.item())
