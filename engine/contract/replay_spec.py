"""What one replay worker process must do, handed from the executor to the runtime.

The executor writes a spec as JSON and starts the old version of the script with
`FLORWB_REPLAY=<spec path>`; the recording runtime then replays instead of recording.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final, Literal

from florwb_engine import settings

ENV = settings.REPLAY.name

ReplayMode = Literal["prefix", "outer", "inner"]
PREFIX: Final = "prefix"  # statements before the main loop: run the script up to it, then stop
OUTER: Final = (
    "outer"  # statements in the main loop's body: skip inner loops where checkpoints allow
)
INNER: Final = "inner"  # statements inside a nested loop: re-execute the iterations needed


@dataclass
class ReplaySpec:
    replay_id: str
    run_id: str
    segment: int
    mode: ReplayMode
    main_loop: str | None  # name of the checkpointed outer flor.loop
    first: int = 0  # outer iterations [first, last] are executed
    last: int = -1
    skip_inner: list[int] = field(default_factory=list)  # outer iterations whose inner loops
    checkpoint_dir: str = ""  # are skipped and restored from checkpoints
    checkpoints: dict[str, str] = field(default_factory=dict)  # iteration -> file name
    args: dict[str, object] = field(default_factory=dict)
    progress_file: str = ""
    start_rng: str = ""  # the run's RNG states at its first florwb call, when recorded
    world_size: int = 1  # ranks of a multi-process run: each replays (ddp_launch.py)
    # the script's own torch.save checkpoints (replay/saved_state.py): iteration -> manifest,
    # and per call site (`train.py:42`) the [keys, expression, required] of what it saved
    mirrored: dict[str, str] = field(default_factory=dict)
    saved_map: dict[str, list[list]] = field(default_factory=dict)
    # flor.load_checkpoint calls the run made (record/lineage.py): name, call, parent run,
    # checkpoint and its path, answered with the same file in the replay
    starts: list[dict] = field(default_factory=list)

    def checkpoint(self, iteration: int) -> Path | None:
        name = self.checkpoints.get(str(iteration))
        return Path(self.checkpoint_dir) / name if name else None

    def mirrored_checkpoint(self, iteration: int) -> Path | None:
        name = self.mirrored.get(str(iteration))
        return Path(self.checkpoint_dir) / name if name else None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> ReplaySpec:
        return cls(**json.loads(Path(path).read_text()))
