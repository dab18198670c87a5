import florwb as flor
import torch

from lib import model, optimizer, loader


def train():
	for epoch in flor.loop("epoch", range(4)):
		for x, y in flor.loop("step", loader):
			loss = model.loss(x, y)
			optimizer.zero_grad()
			loss.backward()
			optimizer.step()
