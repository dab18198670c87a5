"""What a run could not keep exactly, said in one line for listings.

Ingestion and the recording process count, per run, values stored as text, calls dropped,
values lost to a full disk, damaged journal bytes and chunks that cannot be read
(`run_issues`). Readers show a run's issues once, as one line, so nothing is lost in
silence and nothing is repeated per value.
"""

from __future__ import annotations

_ORDER = ("unreadable", "start lost", "restarted", "lost", "dropped", "replaced", "damaged")


def summary(issues: list[dict]) -> str | None:
    """E.g. `120 values lost (journal could not be written); 2 values kept as text
    (complex: 2)`; None when the run has no issues."""
    if not issues:
        return None
    by_kind: dict[str, list[dict]] = {}
    for issue in issues:
        by_kind.setdefault(issue["kind"], []).append(issue)
    parts = []
    for kind in sorted(by_kind, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER)):
        group = by_kind[kind]
        n = sum(i["n"] for i in group)
        details = ", ".join(f"{i['detail']}: {i['n']}" for i in group[:3])
        more = f", {len(group) - 3} more" if len(group) > 3 else ""
        if kind == "unreadable":
            parts.append(f"journal unreadable from a chunk on ({group[0]['detail']})")
        elif kind == "start lost":
            parts.append(f"journal lost its start ({group[0]['detail']})")
        elif kind == "restarted":
            parts.append(f"journal deleted and written anew ({details}{more})")
        elif kind == "damaged":
            parts.append(f"{n} damaged journal bytes skipped ({details}{more})")
        elif kind == "lost":
            parts.append(f"{n} values lost ({details}{more})")
        elif kind == "dropped":
            parts.append(f"{n} log calls dropped ({details}{more})")
        elif kind == "replaced":
            parts.append(f"{n} values or names kept as text ({details}{more})")
        else:
            parts.append(f"{n} {kind} ({details}{more})")
    return "; ".join(parts)


def values_lost(issues: list[dict]) -> int:
    return sum(i["n"] for i in issues if i["kind"] in ("lost", "dropped"))
