import florwb as flor
from config import *


def warmup_lr(step, base_lr, warmup_steps):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    return base_lr


for step in flor.loop("step", range(1000)):
    lr = warmup_lr(step, BASE_LR, WARMUP)
