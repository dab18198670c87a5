import florwb as flor
import torch

from bert import model, optimizer, scheduler, train_dataloader

model.train()
for epoch in flor.loop("epoch", range(3)):
    for step, batch in enumerate(flor.loop("step", train_dataloader)):
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        flor.log("lr", scheduler.get_last_lr()[0])
        optimizer.zero_grad()
