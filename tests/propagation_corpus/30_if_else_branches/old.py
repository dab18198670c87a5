import florwb as flor
import torch

from nets import Net, init_weights

model = Net()
resume = flor.arg("resume", "")
if resume:
    print("resuming from", resume)
    state = torch.load(resume, map_location="cpu")
    model.load_state_dict(state["model"])
else:
    model.apply(init_weights)
