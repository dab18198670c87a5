"""Inference only: nothing is trained, so there is nothing to instrument."""
import torch

threshold = 0.5
model = torch.nn.Linear(3, 1)
with torch.no_grad():
    for batch in torch.randn(5, 2, 3):
        print((torch.sigmoid(model(batch)) > threshold).int().tolist())
