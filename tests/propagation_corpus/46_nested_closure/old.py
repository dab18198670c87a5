import florwb as flor
import torch


def make_step(model, optimizer, clip=1.0):
    def step(batch):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    return step
