import florwb as flor
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter()


def report(metrics, step):
    writer.add_scalars("train", metrics, step)
    flor.log("n_metrics", len(metrics))


for epoch in flor.loop("epoch", range(30)):
    report(train_one_epoch(), epoch)
