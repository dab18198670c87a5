import flordb as flor
import torch

from rl import make_env, Policy, rollout

env = make_env("CartPole-v1")
policy = Policy(env.observation_space.shape[0], env.action_space.n)
optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)

with flor.checkpointing(policy=policy, optimizer=optimizer):
    for episode in flor.loop("episode", range(500)):
        log_probs, rewards = rollout(env, policy)
        returns = torch.tensor(rewards).flip(0).cumsum(0).flip(0)
        loss = -(torch.stack(log_probs) * (returns - returns.mean())).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
