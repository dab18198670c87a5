import florwb as flor
import torch

from lib import model, optimizer, loader

scaler = torch.cuda.amp.GradScaler()
for epoch in flor.loop("epoch", range(10)):
    for x, y in flor.loop("step", loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        flor.log("loss_scale", scaler.get_scale())
