import florwb as flor
import torch


def train(model, loader, optimizer, writer, log_every=50):
    running = 0.0
    for step, (x, y) in enumerate(flor.loop("step", loader)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss.item()
        if step % log_every == log_every - 1:
            try:
                wandb.log({"loss": running / log_every}, step=step)
            except ConnectionError:
                running = 0.0
    return running
