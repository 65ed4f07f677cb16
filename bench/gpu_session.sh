#!/usr/bin/env bash
# The whole GPU-machine run of the telemetry figures, in two parts that each fit in ten
# minutes; wheels for Python 3.12 in .whl/ (docs/benchmarks.md says how they are made).
#   bash bench/gpu_session.sh e2e      # end to end, as it is (bench/gpu_e2e.sh)
#   bash bench/gpu_session.sh rest     # tflops_est per precision and its history (bench/gpu_precision.py),
#                                      # then the agent as a whole process against the real console
#   bash bench/gpu_session.sh agent    # the agent as a whole process alone
#   bash bench/gpu_session.sh all      # everything
# Summaries go to $OUT (e2e.md, precision.md, agent_process.md, machine.txt), everything
# else (logs, JSON) into $OUT/<part>.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
part="${1:-all}"
OUT="${OUT:-/tmp/gpu-session}"
WORK="$(mktemp -d /tmp/gpu-session-XXXX)"
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1
python3 -m compileall -q monitoring bench console instances billing audit jobs scaling /tmp/site >/dev/null 2>&1 || true
{
  date -u; uptime; nproc; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv
  python3 -c "import sys, torch, pynvml, websockets, django; print(sys.version.split()[0], 'torch', torch.__version__, 'websockets', websockets.__version__, 'django', django.__version__)"
} >"$OUT/machine.txt" 2>&1
status=0
if [ "$part" = e2e ] || [ "$part" = all ]; then
  OUT="$WORK/e2e" GPUCONSOLE_VAR_DIR="$WORK/e2e-var" bash bench/gpu_e2e.sh || status=$?
  cp "$WORK/e2e/e2e.md" "$OUT/e2e.md" 2>/dev/null
  tar -czf "$OUT/e2e.tar.gz" -C "$WORK" e2e 2>/dev/null
fi
if [ "$part" = rest ] || [ "$part" = all ]; then
  GPUCONSOLE_VAR_DIR="$WORK/precision-var" python3 bench/gpu_precision.py --seconds "${PHASE_S:-15}" --out "$WORK/precision" \
    >"$WORK/precision.log" 2>&1 || status=$?
  cp "$WORK/precision/precision.md" "$OUT/precision.md" 2>/dev/null || tail -40 "$WORK/precision.log"
  tar -czf "$OUT/precision.tar.gz" -C "$WORK" precision precision.log 2>/dev/null
fi
if [ "$part" = rest ] || [ "$part" = agent ] || [ "$part" = all ]; then
  python3 bench/agent_process.py --seconds "${WINDOW_S:-90}" --warmup 10 \
    --tools agent,agent-console,bare,nvitop,nvidia-smi --devices 1,8 \
    --out "$WORK/agent_process.json" >"$WORK/agent_process.md" 2>&1 || status=$?
  cp "$WORK/agent_process.md" "$OUT/agent_process.md"
  tar -czf "$OUT/agent.tar.gz" -C "$WORK" agent_process.json 2>/dev/null
fi
uptime >>"$OUT/machine.txt"
exit $status
