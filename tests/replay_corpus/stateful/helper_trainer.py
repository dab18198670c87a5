# kuangliu/pytorch-cifar's shape: the main loop calls train() and test() helpers, the inner
# loop lives in train(), test() raises a `global best_acc` and saves a checkpoint when it
# does, and the DataLoader shuffles with a seeded generator over two worker processes.
import torch
from torch.utils.data import DataLoader, TensorDataset

import florwb as flor

torch.manual_seed(3)
x = torch.randn(96, 5)
y = (x[:, 0] + x[:, 1] > 0).long()
generator = torch.Generator()
generator.manual_seed(0)
trainloader = DataLoader(
    TensorDataset(x[:64], y[:64]), batch_size=16, shuffle=True, num_workers=2, generator=generator
)
testloader = DataLoader(TensorDataset(x[64:], y[64:]), batch_size=32, shuffle=False)
net = torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.ReLU(), torch.nn.Linear(12, 2))
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
best_acc = 0.0
# @before flor.log("w_start", float(net[0].weight.detach().sum()))


def train(epoch):
    net.train()
    train_loss = 0.0
    for batch_idx, (inputs, targets) in flor.loop("step", enumerate(trainloader)):
        optimizer.zero_grad()
        loss = criterion(net(inputs), targets)
        loss.backward()
        optimizer.step()
        train_loss += loss.item()
        # @step flor.log("batch_loss", loss.item() + float(targets.sum()))
    return train_loss / (batch_idx + 1)


def test(epoch):
    global best_acc
    net.eval()
    correct = 0
    with torch.no_grad():
        for inputs, targets in testloader:
            correct += (net(inputs).argmax(1) == targets).sum().item()
    acc = 100.0 * correct / 32
    if acc > best_acc:
        torch.save({"net": net.state_dict(), "acc": acc, "epoch": epoch}, "ckpt.pth")
        best_acc = acc
    return acc


with flor.checkpointing(net=net, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 6))):
        # @epoch_start flor.log("best_before", best_acc)
        flor.log("train_loss", train(epoch))
        flor.log("acc", test(epoch))
        # @epoch_end flor.log("best_after", best_acc + float(net[2].weight.detach().norm()))
