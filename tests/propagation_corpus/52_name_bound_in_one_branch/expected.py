import florwb as flor
import torch

from setup import model, optimizer, scheduler, train_loader, validate

with flor.checkpointing(model=model, optimizer=optimizer):
    for epoch in flor.loop("epoch", range(40)):
        for x, y in flor.loop("step", train_loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            flor.log("loss", loss.item())
        if epoch % 5 == 0:
            val_loss = validate(model)
            print(f"epoch {epoch}: val {val_loss:.4f}")
        scheduler.step()
