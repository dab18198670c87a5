import florwb as flor
import torch
from torch import nn

from mnist import loaders, Net

train_loader, val_loader = loaders(batch_size=flor.arg("batch_size", 32))
model = Net()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
loss_fn = nn.CrossEntropyLoss()

with flor.checkpointing(model=model, opt=opt):
    for epoch in flor.loop("epoch", range(10)):
        for i, (images, labels) in enumerate(flor.loop("step", train_loader)):
            logits = model(images)
            loss = loss_fn(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % 100 == 0:
                print(f"epoch {epoch} step {i} loss {loss.item():.4f}")
            flor.log("loss", loss.item())
