import florwb as flor
import torch

from ppo import agent, envs, collect, ppo_update

max_steps = flor.arg("max_steps", 100000)
step = 0
while step < max_steps:
    batch = collect(envs, agent, 2048)
    stats = ppo_update(agent, batch, epochs=4)
    flor.log("approx_kl", stats["approx_kl"])
    flor.log("mean_return", batch.returns.mean().item())
    step += 2048
