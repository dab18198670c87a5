#!/usr/bin/env bash
# florwb's GPU path on a CUDA machine in one go: at most about 6 minutes on an H100, every
# step under its own timeout. For a machine with python3, torch, numpy, pandas, psutil and
# rich but without florwb's other dependencies: their cp312 wheels are expected under .whl/
# (see benchmarks/README.md). Writes everything under $OUT (default /tmp/gpu-out):
# nvidia-smi, the checks of benchmarks/gpu_check.py (CHECK lines), the two benches with
# --device cuda (RESULT lines). Run from anywhere: bash benchmarks/gpu_check.sh
# With --quick (about 3 minutes): only the log_no_sync check and the two benches.
# flordb for the benches' side-by-side columns: its wheel and the pure-Python ones it imports
# (gitpython, gitdb, smmap, tqdm...) under .whl/ are installed, offline, into
# benchmarks/.env/flordb, the folder the benches put alone on flordb's PYTHONPATH.
cd "$(dirname "$0")/.." || exit 1
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  $(ls .whl/*.whl | grep -v '/flordb-') \
  || echo "=== pip could not install every wheel under .whl/: going on with what is there"
FLORDB_DIR=benchmarks/.env/flordb
FLORDB_WHEELS=$(ls .whl/flordb-*.whl 2>/dev/null)
if [ -n "$FLORDB_WHEELS" ] && [ ! -f "$FLORDB_DIR/flordb/__init__.py" ]; then
  for dep in gitpython gitdb smmap tqdm cloudpickle astunparse bidict apted sh six; do
    FLORDB_WHEELS="$FLORDB_WHEELS $(ls .whl/"$dep"-*.whl 2>/dev/null)"
  done
  # shellcheck disable=SC2086 # one word per wheel
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$FLORDB_DIR" \
    $FLORDB_WHEELS || echo "=== flordb's wheels did not all install into $FLORDB_DIR"
fi
if [ -f "$FLORDB_DIR/flordb/__init__.py" ]; then  # flordb imports only inside a git repository
  SCRATCH=$(mktemp -d) && git -C "$SCRATCH" init -q && ROOT=$PWD
  (cd "$SCRATCH" && PYTHONPATH=$ROOT/$FLORDB_DIR python3 -c "import flordb" </dev/null \
    >/dev/null 2>"$SCRATCH/err" && echo "=== flordb imports from $FLORDB_DIR") \
    || echo "=== flordb does not import from $FLORDB_DIR (the benches skip it): $(tail -1 "$SCRATCH/err")"
  rm -rf "$SCRATCH"
fi
export PYTHONPATH=/tmp/site:/tmp/florwb-path${PYTHONPATH:+:$PYTHONPATH}
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
# The engine folder installs as florwb_engine: without an install, a folder of links stands in.
mkdir -p /tmp/florwb-path
ln -sfn "$PWD/engine" /tmp/florwb-path/florwb_engine
ln -sfn "$PWD/florwb" /tmp/florwb-path/florwb
export PYTHONDONTWRITEBYTECODE=1

step() {  # step NAME SECONDS COMMAND...: output to $OUT/NAME.txt and to stdout
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - start))s"
}

step nvidia-smi 20 nvidia-smi
step versions 60 python3 -c "
import sys, torch, duckdb, libcst, florwb, florwb_engine
print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.is_available(), torch.cuda.device_count(), 'duckdb', duckdb.__version__)
print('florwb from', florwb.__file__, '| engine from', florwb_engine.__file__)
import subprocess; print(subprocess.run(['git', '--version'], capture_output=True, text=True).stdout)
"
# the stand-in device tests, where pytest is there (they need no GPU)
if [ "$QUICK" = 0 ] && python3 -c "import pytest" 2>/dev/null; then
  step stand_in_tests 90 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_device_path.py
fi
if [ "$QUICK" = 1 ]; then
  step gpu_check 90 python3 benchmarks/gpu_check.py "$OUT/gpu_check" log_no_sync log_side_stream
else
  step gpu_check 260 python3 benchmarks/gpu_check.py "$OUT/gpu_check"
fi
# flordb adds a fourth backend (a run of it per round); --quick times one round of the overhead
ROUNDS=$([ "$QUICK" = 1 ] && echo 1 || echo 2)
step bench_log_hotpath_cuda 90 python3 benchmarks/bench_log_hotpath.py --device cuda \
  --epochs 4 --steps 500 --repeats 2
step bench_record_overhead_cuda $((40 + 35 * ROUNDS)) python3 benchmarks/bench_record_overhead.py \
  --device cuda --rounds "$ROUNDS"
echo "=== summary"
grep -h "^CHECK\|^RESULT" "$OUT"/*.txt
