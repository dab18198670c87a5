import florwb as flor
import torch

from nets import Net, init_weights

model = Net()
resume = flor.arg("resume", "")
if resume:
    state = torch.load(resume, map_location="cpu")
    model.load_state_dict(state["model"])
    flor.log("start_epoch", state["epoch"])
else:
    model.apply(init_weights)
    flor.log("init_std", model.fc.weight.std().item())
