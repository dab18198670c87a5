# Writes the data file of data_file.py: 2.4 MiB of float64, all 1.0 in version 1 and all
# 2.0 in version 2 (run with `exec`; `write(folder, version)`).
import numpy as np


def write(folder, version):
    np.save(folder / "data.npy", np.full((300_000,), float(version)))
