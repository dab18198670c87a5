import florwb as flor
import torch

from lib import model, optimizer, loader

for epoch in flor.loop("epoch", range(10)):
    correct = total = 0
    for x, y in flor.loop("step", loader):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        correct += (out.argmax(1) == y).sum().item()
        total += len(y)
        acc = correct / total
        flor.log("running_acc", acc)
