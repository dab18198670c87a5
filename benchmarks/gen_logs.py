"""Log BENCH_ROWS values (4 names per step, two nested flor.loops) as fast as possible."""

import os

import florwb as flor

rows = int(os.environ.get("BENCH_ROWS", "1000000"))
epochs = 10
steps = rows // epochs // 4
for _epoch in flor.loop("epoch", range(epochs)):
    for step in flor.loop("step", range(steps)):
        flor.log("loss", 1.0 / (step + 1))
        flor.log("acc", 0.5)
        flor.log("lr", 0.01)
        flor.log("grad_norm", float(step))
flor.commit()
