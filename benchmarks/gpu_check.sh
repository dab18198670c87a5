#!/usr/bin/env bash
# florwb's GPU path on a CUDA machine in one go: at most about 6 minutes on an H100, every
# step under its own timeout. For a machine with python3, torch, numpy, pandas, psutil and
# rich but without florwb's other dependencies: their cp312 wheels are expected under .whl/
# (see benchmarks/README.md). Writes everything under $OUT (default /tmp/gpu-out):
# nvidia-smi, the checks of benchmarks/gpu_check.py (CHECK lines), the two benches with
# --device cuda (RESULT lines). Run from anywhere: bash benchmarks/gpu_check.sh
cd "$(dirname "$0")/.." || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  || echo "=== pip could not install every wheel under .whl/: going on with what is there"
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
if python3 -c "import pytest" 2>/dev/null; then
  step stand_in_tests 90 python3 -m pytest -q -p no:cacheprovider -o addopts= tests/test_device_path.py
fi
step gpu_check 220 python3 benchmarks/gpu_check.py "$OUT/gpu_check"
step bench_log_hotpath_cuda 60 python3 benchmarks/bench_log_hotpath.py --device cuda \
  --epochs 4 --steps 500 --repeats 2
step bench_record_overhead_cuda 75 python3 benchmarks/bench_record_overhead.py --device cuda \
  --rounds 2
echo "=== summary"
grep -h "^CHECK\|^RESULT" "$OUT"/*.txt
