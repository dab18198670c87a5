"""Ingestion speed (journal -> DuckDB rows/s) and `dataframe` over 10 million log rows.

Targets: ingestion >= 1,000,000 rows/s; dataframe over 10M rows <= 2 s.
Run: .venv/bin/python benchmarks/bench_store.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from _common import BENCH_DIR, PYTHON, backend_env, note, result, temp_git_repo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5, help="runs the rows are spread over")
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH_DIR.parent))
    from florwb_engine.store import Store

    with temp_git_repo(BENCH_DIR / "gen_logs.py") as repo:
        per_run = args.rows // args.runs
        note(f"recording {args.runs} runs x {per_run:,} log rows")
        for _ in range(args.runs):
            subprocess.run(
                [str(PYTHON), "gen_logs.py"],
                cwd=repo,
                env=backend_env("florwb", BENCH_ROWS=str(per_run)),
                check=True,
            )
        store = Store(repo)
        start = time.perf_counter()
        report = store.ingest()
        ingest_s = time.perf_counter() - start
        assert not report.errors, report.errors
        note(f"ingested {report.rows:,} rows from {report.journals} journals in {ingest_s:.2f} s")
        result("ingest_rows_per_s", report.rows / ingest_s, "rows/s")

        total = store.query("SELECT count(*) AS n FROM logs").n[0]
        note(f"logs table holds {total:,} rows")
        timings = []
        for _ in range(3):
            start = time.perf_counter()
            frame = store.dataframe("loss", "acc", "lr", "grad_norm")
            timings.append(time.perf_counter() - start)
        note(f"dataframe: {len(frame):,} rows x {len(frame.columns)} columns")
        result("dataframe_10m_rows_s", min(timings), "s")


if __name__ == "__main__":
    main()
