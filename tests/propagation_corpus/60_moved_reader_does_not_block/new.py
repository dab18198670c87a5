import florwb as flor
import torch


def after_step(scheduler, model, step):
    lr = scheduler.get_last_lr()[0]
    print(f"step {step} lr {lr:.2e}")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    flor.log("lr", lr)
    scheduler.step()
    return grad_norm
