# pytorch/examples' REINFORCE/actor-critic shape: an episode loop over count() that breaks
# once solved, a running reward carried across episodes, episodes that end early through
# `break`, and a toy environment of its own (a walk to a goal on a line; no gym).
import itertools

import torch

import florwb as flor

torch.manual_seed(543)
gamma = 0.9


class Walk:
    def reset(self):
        self.pos = int(torch.randint(-2, 3, (1,)))
        return self.obs()

    def obs(self):
        return torch.tensor([self.pos / 4.0, 1.0])

    def step(self, action):
        self.pos += 1 if action == 1 else -1
        done = abs(self.pos) >= 4
        reward = 1.0 if self.pos >= 4 else (-1.0 if done else -0.05)
        return self.obs(), reward, done


env = Walk()
policy = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.Adam(policy.parameters(), lr=0.03)
running_reward = -1.0
# @before flor.log("policy_w", float(policy[2].weight.detach().sum()))
with flor.checkpointing(policy=policy, optimizer=optimizer):
    for i_episode in flor.loop("episode", itertools.count(1)):
        state, ep_reward = env.reset(), 0.0
        log_probs, rewards = [], []
        # @epoch_start flor.log("running_before", running_reward)
        for t in flor.loop("t", range(1, 12)):
            dist = torch.distributions.Categorical(logits=policy(state))
            action = dist.sample()
            log_probs.append(dist.log_prob(action))
            state, reward, done = env.step(action.item())
            rewards.append(reward)
            ep_reward += reward
            # @step flor.log("pos", env.pos + 10 * t)
            if done:
                break
        running_reward = 0.05 * ep_reward + 0.95 * running_reward
        R, returns = 0.0, []
        for r in reversed(rewards):
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        loss = -(torch.stack(log_probs) * (returns - returns.mean())).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        flor.log("ep_reward", ep_reward)
        flor.log("running_reward", running_reward)
        # @epoch_end flor.log("ep_len", len(rewards) + 100 * running_reward)
        if running_reward > 0.2 or i_episode == 14:
            print(f"stopped at episode {i_episode}, running reward {running_reward:.3f}")
            break
