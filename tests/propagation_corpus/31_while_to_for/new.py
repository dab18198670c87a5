import florwb as flor
import torch

from ppo import agent, envs, collect, ppo_update

max_steps = flor.arg("max_steps", 100000)
for step in flor.loop("update", range(0, max_steps, 2048)):
    batch = collect(envs, agent, 2048)
    stats = ppo_update(agent, batch, epochs=4)
    flor.log("approx_kl", stats["approx_kl"])
    flor.log("mean_return", batch.returns.mean().item())
