#!/usr/bin/env bash
# One command on the GPU machine: the end-to-end run and the agent's cost against the tools
# users run today. Wheels for Python 3.12 must be in .whl/ (see docs/benchmarks.md).
#   bash bench/gpu_e2e.sh            # writes e2e.md, e2e.json, tools.json under $OUT (default /tmp/gpu-e2e)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-e2e}"
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export GPUCONSOLE_VAR_DIR="${GPUCONSOLE_VAR_DIR:-/tmp/gpc-e2e-var}"
rm -rf "$GPUCONSOLE_VAR_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
python3 bench/gpu_e2e.py --out "$OUT" || status=$?
python3 bench/nvml_tools.py --out "$OUT/tools.json" 2>&1 | tee "$OUT/tools.md" || status=$?
exit $status
