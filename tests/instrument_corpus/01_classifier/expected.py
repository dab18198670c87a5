"""A torchvision-style image classifier on a synthetic dataset (no downloads).

Same structure as the classic CIFAR-10 tutorial: a small CNN, a DataLoader, a train loop
over epochs and batches, and an evaluation pass after every epoch.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

# --- hyperparameters ---
BATCH_SIZE = flor.arg("BATCH_SIZE", 16)
LEARNING_RATE = flor.arg("LEARNING_RATE", 0.05)   # plain SGD with momentum
MOMENTUM = flor.arg("MOMENTUM", 0.9)
EPOCHS = flor.arg("EPOCHS", 2)
NUM_CLASSES = flor.arg("NUM_CLASSES", 10)

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(6 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, NUM_CLASSES)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def synthetic(n):
    images = torch.randn(n, 3, 16, 16)
    labels = torch.randint(0, NUM_CLASSES, (n,))
    return TensorDataset(images, labels)


trainloader = DataLoader(synthetic(64), batch_size=BATCH_SIZE, shuffle=True)
testloader = DataLoader(synthetic(32), batch_size=BATCH_SIZE)

net = Net()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(),
                            lr=LEARNING_RATE,
                            momentum=MOMENTUM)

with flor.checkpointing(model=net, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(EPOCHS)):  # loop over the dataset multiple times
        net.train()
        running_loss = 0.0
        for i, data in enumerate(flor.loop("step", trainloader), 0):
            # get the inputs; data is a list of [inputs, labels]
            inputs, labels = data

            optimizer.zero_grad()

            # forward + backward + optimize
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            flor.log("loss", loss)
            optimizer.step()

            running_loss += loss.item()

        net.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in testloader:
                predicted = net(images).argmax(1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        print(f"[{epoch + 1}] loss: {running_loss / len(trainloader):.3f} "
              f"accuracy: {100 * correct // total} %")

print('Finished Training')
