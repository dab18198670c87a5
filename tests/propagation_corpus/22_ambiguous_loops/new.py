import florwb as flor
from setup import model, optimizer, criterion, loader

for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())

print("done")
