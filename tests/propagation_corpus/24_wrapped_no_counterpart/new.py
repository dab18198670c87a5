import florwb as flor
from torch.utils.data import DataLoader

from data import dataset

loader = DataLoader(dataset, batch_size=flor.log("batch_size", 64), shuffle=True)
