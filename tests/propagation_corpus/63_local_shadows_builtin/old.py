import florwb as flor
import torch.nn.functional as F


def train_step(model, batch, optimizer):
    inputs = batch["input_ids"]
    logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for batch in flor.loop("step", loader):
    train_step(model, batch, optimizer)
