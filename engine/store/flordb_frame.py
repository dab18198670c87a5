"""flordb's columns on `flor.dataframe`: scripts written for flordb read `tstamp`,
`filename`, `projid` and, for a `flor.iteration` given a value, `<name>_value`.

`tstamp` is the run's start time (what flordb names a run by, and what
`flor.load_checkpoint(row.tstamp)` takes), `filename` its script, `projid` the project
folder's name, `source` `forward` for a row of recorded values and `replay` for a row a
replay filled in (flordb keeps forward and replayed rows apart; florwb fills a hindsight
value into the recorded run's row, so a row holding a value only a replay logged says
`replay`).
`<name>_value` is logged once per flor.iteration (record/api.py) and put on
every row of that iteration, nested loops' rows included, as flordb's context gives it.
"""

from __future__ import annotations

from typing import Any

from florwb_engine.store.catalog import Store
from florwb_engine.store.db import StoreError
from florwb_engine.store.schema import RECORDED, literal, quote

FIXED = ("run_id", "version", "start_time", "rank", "diverged")


def run_level_names(store: Store) -> tuple[str, ...]:
    """The names logged outside any loop, what flordb's `flor.dataframe()` shows."""
    rows = store.query("SELECT DISTINCT name FROM logs WHERE ctx_id = 0 ORDER BY name")
    return tuple(str(n) for n in rows["name"])


def flordb_columns(store: Store, frame: Any, names: tuple[str, ...]) -> Any:
    attrs = dict(frame.attrs)
    loops = [c for c in frame.columns if c not in FIXED and c not in names]
    for column in loops:
        value_name = f"{column}_value"
        if value_name in names or value_name in frame.columns:
            continue
        try:
            values = store.dataframe(value_name)
        except StoreError:  # no flor.iteration of that name logged a value
            continue
        keys = ["run_id", *[c for c in loops if c in values.columns]]
        values = values[[*keys, value_name]].dropna(subset=[value_name])
        values = values.drop_duplicates(subset=keys, keep="last")
        for key in keys:
            values[key] = values[key].astype(frame[key].dtype)
        frame = frame.merge(values, on=keys, how="left")
    scripts = dict(
        store.query("SELECT run_id, script FROM runs").itertuples(index=False, name=None)
    )
    at = list(frame.columns).index("start_time") + 1 if "start_time" in frame.columns else 0
    frame.insert(at, "projid", store.project.name)
    frame.insert(at + 1, "tstamp", frame["start_time"] if "start_time" in frame else None)
    frame.insert(at + 2, "filename", [scripts.get(str(r)) for r in frame["run_id"]])
    frame.insert(at + 3, "source", _sources(store, frame, names, loops))
    frame.attrs.update(attrs)
    return frame


def _sources(store: Store, frame: Any, names: tuple[str, ...], loops: list[str]) -> list[str]:
    """`replay` for each row holding a value only a replay logged, else `forward`."""
    if frame.empty or not names:
        return ["forward"] * len(frame)
    keys = ["run_id", *(["rank"] if "rank" in frame.columns else []), *loops]
    listed = ", ".join(quote(k) for k in keys)
    wanted = ", ".join(literal(n) for n in names)
    # a name with no recorded value at these coordinates: a replay filled it in (a replay
    # also logs the recorded names again, as checks; those rows stay `forward`)
    replayed = store.query(
        f"SELECT DISTINCT {listed} FROM (SELECT {listed}, name FROM logs "
        f"WHERE name IN ({wanted}) GROUP BY ALL "
        f"HAVING NOT bool_or(source = {literal(RECORDED)}))"
    )
    if replayed.empty:
        return ["forward"] * len(frame)
    for key in keys:
        replayed[key] = replayed[key].astype(frame[key].dtype)
    replayed["_replayed"] = True
    marked = frame[keys].merge(replayed, on=keys, how="left")["_replayed"]
    return ["replay" if bool(m) is True and m == m else "forward" for m in marked]
