#!/usr/bin/env bash
# One command on the GPU machine: what NVML reports for MIG, vGPU and GPM (read-only), then
# the agent as a whole process beside a bare pynvml loop, nvitop and nvidia-smi at 1 Hz.
# Wheels for Python 3.12 (websockets, nvitop; see docs/benchmarks.md) may be in .whl/.
#   bash bench/gpu_agent_process.sh      # writes under $OUT (default /tmp/gpu-agent-process)
#   BEFORE=/path/to/older/checkout bash bench/gpu_agent_process.sh   # also that agent, beside
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-agent-process}"
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1
# As pip installs do: byte-compiled once, so no tool pays for compiling at its start.
python3 -m compileall -q monitoring bench /tmp/site ${BEFORE:+"$BEFORE"} >/dev/null 2>&1 || true
{
  date -u; uptime; nproc; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv
  nvidia-smi -q | grep -i -A2 "virtualization" || true
  python3 -c "import pynvml, websockets, sys; print(sys.version.split()[0], 'nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?', 'websockets', websockets.__version__)"
  python3 -c "import nvitop; print('nvitop', nvitop.__version__)" || true
} 2>&1 | tee "$OUT/machine.txt"
status=0
python3 bench/gpu_features.py --out "$OUT/features.json" 2>&1 | tee "$OUT/features.md" || status=$?
python3 bench/agent_process.py --seconds "${WINDOW_S:-120}" --warmup 10 ${BEFORE:+--before "$BEFORE"} \
  --out "$OUT/agent_process.json" 2>&1 \
  | tee "$OUT/agent_process.md" || status=$?
uptime | tee -a "$OUT/machine.txt"
exit $status
