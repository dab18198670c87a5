import florwb as flor
import torch.nn.functional as F


def train_step(model, x, y, optimizer, scale, accumulation):
    loss = F.mse_loss(model(x), y)
    loss = loss * scale / accumulation
    flor.log("scaled_loss", loss.item())
    loss.backward()
    optimizer.step()
