import florwb as flor
import torch
from torch import nn

model = nn.Transformer(d_model=flor.log("d_model", 512), nhead=8, num_encoder_layers=6)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))
