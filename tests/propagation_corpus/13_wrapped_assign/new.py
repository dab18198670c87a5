import florwb as flor
import torch
import torch.nn as nn

from seg import UNet, loaders

model = UNet(in_channels=3, classes=2)
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=flor.arg("lr", 2e-4))
train_loader, _ = loaders()

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(40)):
        for image, mask in flor.loop("step", train_loader):
            output = model(image)
            loss = flor.log("loss", criterion(output, mask))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
