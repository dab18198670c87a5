"""OneCycle LR schedule stepped every batch, model and optimizer from a factory."""
import torch
from torch import nn, optim
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

max_lr = flor.arg("max_lr", 0.1)
num_epochs = flor.arg("num_epochs", 2)


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x):
        return self.body(x)


def build(width):
    net = MLP(width)
    return net, optim.Adam(net.parameters(), lr=max_lr / 10)


torch.manual_seed(3)
loader = DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=10)
model, optimizer = build(width=8)
scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=num_epochs * len(loader))

with flor.checkpointing(model=model, optimizer=optimizer, scheduler=scheduler):
    for epoch in flor.loop("epoch", range(num_epochs)):
        model.train()
        for batch_idx, (inputs, target) in enumerate(flor.loop("step", loader)):
            optimizer.zero_grad()
            loss = nn.functional.smooth_l1_loss(model(inputs), target)
            loss.backward()
            flor.log("loss", loss)
            optimizer.step()
            scheduler.step()
        print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.5f} loss {loss.item():.4f}")
