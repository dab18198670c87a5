import florwb as flor
import torch


class Trainer:
    def __init__(self, model, lr=1e-3, amp=False):
        self.model = model
        self.use_amp = amp
        flor.log("use_amp", self.use_amp)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.scaler = torch.cuda.amp.GradScaler(enabled=amp)
        self.step_count = 0
        self.log_every = 50

    def step(self, batch):
        x, y = batch
        with torch.autocast("cuda", enabled=self.use_amp):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step_count += 1
        return loss
