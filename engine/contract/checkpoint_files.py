"""Names in a run's checkpoint folder that the recording runtime writes (record/) and its
readers recognise (the run listing in store/, replay planning in replay/)."""

from __future__ import annotations

# a mirrored torch.save's manifest (record/save_mirror.py): which files one save wrote
MANIFEST_SUFFIX = ".saves.json"


def is_manifest(name: str) -> bool:
    return name.endswith(MANIFEST_SUFFIX)
