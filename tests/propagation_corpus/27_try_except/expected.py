import florwb as flor
import torch

from pipeline import model, optimizer, stream

for step, batch in enumerate(flor.loop("step", stream())):
    try:
        loss = model(batch).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        flor.log("loss", loss.item())
    except RuntimeError as err:
        print("skipping batch", step, err)
        torch.cuda.empty_cache()
        flor.log("oom_step", step)
