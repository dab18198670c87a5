import florwb as flor
import torch.nn.functional as F

from mnist import model, optimizer, train_loader

for epoch in flor.loop("epoch", range(14)):
    model.train()
    for i, (x, y) in enumerate(flor.loop("step", train_loader)):
        optimizer.zero_grad()
        output = model(x)
        loss = F.nll_loss(output, y)
        loss.backward()
        optimizer.step()
