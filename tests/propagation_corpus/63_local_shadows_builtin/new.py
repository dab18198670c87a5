import florwb as flor
import torch.nn.functional as F


def train_step(model, batch, optimizer):
    input = batch["input_ids"]
    flor.log("seq_len", input.shape[1])
    logits = model(input)
    loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for batch in flor.loop("step", loader):
    train_step(model, batch, optimizer)
