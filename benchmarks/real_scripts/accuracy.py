# An epoch/step loop in the shape of pytorch-cifar: accuracy accumulated over the batches
# (`correct`, `total`) and read after the step loop, an evaluation pass over held-out data,
# a best-so-far accuracy and a cosine LR schedule stepped at the end of the epoch.
# BENCH_EPOCHS / BENCH_STEPS size it; CPU, one thread, fixed seeds, no downloads.
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import florwb as flor

torch.set_num_threads(1)
torch.manual_seed(1)
epochs = flor.arg("epochs", int(os.environ.get("BENCH_EPOCHS", "3")))
steps = flor.arg("steps", int(os.environ.get("BENCH_STEPS", "100")))
batch_size = 64

teacher = torch.randn(32, 10)
x_train = torch.randn(steps * batch_size, 32)
x_test = torch.randn(1024, 32)
trainloader = DataLoader(
    TensorDataset(x_train, (x_train @ teacher).argmax(1)), batch_size=batch_size, shuffle=True
)
testloader = DataLoader(TensorDataset(x_test, (x_test @ teacher).argmax(1)), batch_size=256)

net = nn.Sequential(
    nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(
    net.parameters(), lr=flor.arg("lr", 0.05), momentum=0.9, weight_decay=5e-4
)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
best_acc = 0.0

with flor.checkpointing(net=net, optimizer=optimizer, scheduler=scheduler):
    for epoch in flor.loop("epoch", range(epochs)):
        net.train()
        train_loss = 0.0
        correct = 0
        total = 0
        for batch_idx, (inputs, targets) in flor.loop("step", enumerate(trainloader)):  # noqa: B007
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()
            flor.log("loss", loss.item())
        print(f"epoch {epoch}: loss {train_loss / (batch_idx + 1):.3f}, {correct}/{total} right")
        net.eval()
        test_correct = 0
        with torch.no_grad():
            for inputs, targets in testloader:
                test_correct += net(inputs).argmax(1).eq(targets).sum().item()
        acc = 100.0 * test_correct / len(x_test)
        flor.log("test_acc", acc)
        if acc > best_acc:
            best_acc = acc
        scheduler.step()
print(f"best test acc {best_acc:.2f}%")
flor.commit()
