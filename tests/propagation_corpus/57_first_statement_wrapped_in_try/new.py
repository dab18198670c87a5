import florwb as flor
import torch


def load_checkpoint(path, model, optimizer):
    state = torch.load(path, map_location="cpu")
    flor.log("ckpt_keys", sorted(state))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    epoch = state.get("epoch", 0)
    return epoch


model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
start = load_checkpoint("last.pt", model, optimizer)
for epoch in flor.loop("epoch", range(start, 10)):
    optimizer.step()
