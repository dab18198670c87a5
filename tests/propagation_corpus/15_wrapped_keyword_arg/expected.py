import florwb as flor
import torch
from torch import nn

model = nn.Transformer(num_encoder_layers=4, d_model=flor.log("d_model", 256), nhead=4, dropout=0.1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))
