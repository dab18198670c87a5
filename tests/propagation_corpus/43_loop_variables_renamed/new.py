import florwb as flor
import torch.nn.functional as F

from mnist import model, optimizer, train_loader

for epoch in flor.loop("epoch", range(14)):
    model.train()
    for batch_idx, (data, target) in enumerate(flor.loop("step", train_loader)):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        flor.log("seen", batch_idx * len(data))
