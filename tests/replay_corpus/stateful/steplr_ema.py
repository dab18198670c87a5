# A StepLR(step_size=2) stepped at the end of the epoch body and registered with the model
# and optimizer, an EMA of the loss carried across epochs, a per-epoch line printed after the
# step loop and a summary after the main loop.
import torch

import florwb as flor

torch.manual_seed(21)
x, y = torch.randn(36, 4), torch.randn(36, 1)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.06, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
ema = None
# @before flor.log("lr_first", opt.param_groups[0]["lr"])
with flor.checkpointing(net=net, opt=opt, sched=sched):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 7))):
        # @epoch_start flor.log("lr_start", opt.param_groups[0]["lr"])
        for step in flor.loop("step", range(3)):
            rows = slice(step * 12, (step + 1) * 12)
            loss = ((net(x[rows]) - y[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
            flor.log("loss", loss.item())
            # @step flor.log("ema", ema)
        print(f"epoch {epoch}: lr {sched.get_last_lr()[0]:.4f}")
        flor.log("lr", sched.get_last_lr()[0])
        sched.step()
        # @epoch_end flor.log("lr_end", sched.get_last_lr()[0] + float(net[2].weight.detach().sum()))
print(f"done: loss ema {ema:.4f}, lr {sched.get_last_lr()[0]:.4f}")
