import florwb as flor
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()


def report(metrics, step):
    for key in sorted(metrics):
        writer.add_scalar(f"train/{key}", float(metrics[key]), global_step=step)
    flor.log("n_metrics", len(metrics))


for epoch in flor.loop("epoch", range(30)):
    report(train_one_epoch(), epoch)
