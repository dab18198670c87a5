"""A small MLP on synthetic data, written against the flordb recording API.

BENCH_FLOR picks the backend: plain (a no-op shim, the zero-cost baseline; default), florwb
(`import florwb as flor`) or flordb (`import flordb as flor`). Sizes come from BENCH_EPOCHS,
BENCH_STEPS (batches per epoch), BENCH_HIDDEN and BENCH_BATCH; the defaults take a few seconds.
BENCH_PRINT=1 prints a line every step, as many scripts do (bench_capture.py).
When BENCH_TIMING_FILE is set, the script writes its own timings there as JSON: flor_import_s
(importing the backend), train_s (first flor call through flor.commit()) and train_cpu_s
(the CPU seconds of all the process's threads over the same span).
BENCH_DEVICE=cuda puts the model and data on the GPU and logs the step's loss as the CUDA
tensor it is (florwb reads it off the training thread; plain logs nothing), except under
flordb, which gets `loss.item()` as a flordb script must write it, and with BENCH_ITEM=1
(plain then costs what that `.item()` costs without any recording). Otherwise CPU only.
One thread, fixed seeds, no downloads.
"""

import contextlib
import json
import os
import random
import time

import torch
from torch import nn

IN_FEATURES = 32
CLASSES = 10


class _PlainFlor:
    """No-op stand-in with the flordb API: what the script costs with no recording at all."""

    @staticmethod
    def arg(name, default=None):
        return default

    @staticmethod
    def log(name, value):
        return value

    @staticmethod
    def loop(name, iterable):
        yield from iterable

    @staticmethod
    def checkpointing(**objects):
        return contextlib.nullcontext()

    @staticmethod
    def commit():
        pass


def load_flor(backend):
    if backend == "plain":
        return _PlainFlor
    if backend == "florwb":
        import florwb

        return florwb
    if backend == "flordb":
        import flordb

        return flordb
    raise SystemExit(f"BENCH_FLOR must be plain, florwb or flordb, not {backend!r}")


_t_import = time.perf_counter()
flor = load_flor(os.environ.get("BENCH_FLOR", "plain"))
_t_imported = time.perf_counter()
_cpu_imported = time.process_time()


def make_data(steps, batch_size, seed):
    """Labels from a fixed random linear teacher, so the MLP has something to learn."""
    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(IN_FEATURES, CLASSES, generator=gen)
    x = torch.randn(steps * batch_size + 1024, IN_FEATURES, generator=gen)
    y = (x @ teacher).argmax(dim=1)
    n = steps * batch_size
    batches = list(zip(x[:n].split(batch_size), y[:n].split(batch_size), strict=True))
    return batches, x[n:], y[n:]


def main():
    torch.set_num_threads(1)
    lr = flor.arg("lr", 1e-3)
    epochs = flor.arg("epochs", int(os.environ.get("BENCH_EPOCHS", "5")))
    steps = flor.arg("steps", int(os.environ.get("BENCH_STEPS", "100")))
    hidden = flor.arg("hidden", int(os.environ.get("BENCH_HIDDEN", "128")))
    batch_size = flor.arg("batch_size", int(os.environ.get("BENCH_BATCH", "64")))
    seed = flor.arg("seed", 0)

    device = os.environ.get("BENCH_DEVICE", "cpu")
    item = os.environ.get("BENCH_FLOR") == "flordb" or os.environ.get("BENCH_ITEM") == "1"
    log_tensor = device != "cpu" and not item

    random.seed(seed)
    torch.manual_seed(seed)
    batches, x_val, y_val = make_data(steps, batch_size, seed)
    if device != "cpu":
        batches = [(x.to(device), y.to(device)) for x, y in batches]
        x_val, y_val = x_val.to(device), y_val.to(device)
    net = nn.Sequential(
        nn.Linear(IN_FEATURES, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, CLASSES),
    ).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    print_steps = os.environ.get("BENCH_PRINT") == "1"

    # epoch and step stay named although unused: hindsight log statements added later use them.
    with flor.checkpointing(model=net, optimizer=opt):
        for epoch in flor.loop("epoch", range(epochs)):  # noqa: B007
            net.train()
            for step, (x, y) in flor.loop("step", enumerate(batches)):  # noqa: B007
                opt.zero_grad()
                loss = loss_fn(net(x), y)
                loss.backward()
                opt.step()
                flor.log("loss", loss.detach() if log_tensor else loss.item())
                if print_steps:
                    print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            net.eval()
            with torch.no_grad():
                acc = (net(x_val).argmax(dim=1) == y_val).float().mean().item()
            flor.log("acc", acc)
    # Printed before commit: flordb records printed lines, and output after its commit()
    # would start (and auto-commit at exit) a second run.
    print(f"final acc {acc:.4f}")
    flor.commit()


if __name__ == "__main__":
    main()
    t_end = time.perf_counter()
    cpu_end = time.process_time()
    timing_file = os.environ.get("BENCH_TIMING_FILE")
    if timing_file:
        timings = {
            "flor_import_s": _t_imported - _t_import,
            "train_s": t_end - _t_imported,
            "train_cpu_s": cpu_end - _cpu_imported,
        }
        with open(timing_file, "w") as f:
            json.dump(timings, f)
