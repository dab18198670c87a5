import florwb as flor
from torch.utils.data import DataLoader

from data import dataset

loader = DataLoader(dataset, shuffle=True)
