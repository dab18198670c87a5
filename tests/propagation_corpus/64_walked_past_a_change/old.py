import florwb as flor
import torch
import torch.nn.functional as F


def train_step(model, x, y, optimizer, scale, accumulation):
    loss = F.mse_loss(model(x), y)
    if scale is not None:
        loss = torch.mul(loss, scale)
    loss.backward()
    optimizer.step()
