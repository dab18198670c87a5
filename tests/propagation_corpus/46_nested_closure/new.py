import florwb as flor
import torch


def make_step(model, optimizer, clip):
    def step(batch):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        flor.log("grad_norm", norm.item())
        optimizer.step()
        return loss.item()

    return step
