import florwb as flor
import torch

from project import build_everything

model, opt, sched, loader, evaluate = build_everything()

with flor.checkpointing(model=model, opt=opt, sched=sched):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 12))):
        for batch in flor.loop("step", loader):
            loss = model.training_step(batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log('loss',loss.item())  # per step
        sched.step()
        flor.log("lr", sched.get_last_lr()[0])
        acc = evaluate(model)
        flor.log("acc", acc)
