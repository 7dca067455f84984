#!/bin/bash
# Every GPU check of the repository in one command, sized for a short lease of a GPU machine
# (at most 9.7 minutes: the step limits below; the second H100 lease of 2026-11-26 took 7.6): the smoke test's per-method checks and its kill-and-resume,
# fedpart bench --device cuda, the batched-gap diagnosis and the round profile. The smoke test
# runs the pytest device checks (python -m pytest --device cuda tests/test_device_checks.py) and
# writes their report. Each step has its own time limit and is interrupted with SIGINT (the
# smoke test still writes its report).
#
#   benchmarks/gpu_checks.sh OUT_DIR [DATA_ROOT]     # DATA_ROOT: default ../shared/data
#
# Reports and logs go to OUT_DIR: env.txt, gpu-smoke.md, smoke.log, gpu-bench.md, bench.log,
# gap.txt, profile.txt. Record them in docs/results/gpu.md with the GPU's name.
set -u
if [ $# -lt 1 ]; then
    echo "usage: benchmarks/gpu_checks.sh OUT_DIR [DATA_ROOT]" >&2
    exit 2
fi
out=$1
data=${2:-../shared/data}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
step() {  # step SECONDS LOG COMMAND...: run with a limit, output to LOG and the terminal
    local limit=$1 log=$2 t0=$SECONDS
    shift 2
    timeout -s INT -k 20 "$limit" "$@" 2>&1 | tee "$out/$log"
    echo "[gpu_checks] $log: $((SECONDS - t0)) s"
}
$py -c "
from fedpart.bench.devices import check_device
from fedpart.errors import FedpartError
try:
    check_device('cuda')
except FedpartError as exc:
    raise SystemExit(f'error: {exc}')
" || exit 2
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    $py -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name())"
} 2>&1 | tee "$out/env.txt"
step "${SMOKE_S:-270}" smoke.log $py benchmarks/gpu_smoke.py --device cuda --rounds 3 \
    --kill-rounds 8 --skip timing --out "$out/gpu-smoke.md"
step "${BENCH_S:-180}" bench.log $py -m fedpart.cli bench --device cuda --data-root "$data" \
    --repeats 3 --out "$out/gpu-bench.md"
step "${GAP_S:-40}" gap.txt $py benchmarks/gpu_batched_gap.py --device cuda
step "${PROFILE_S:-90}" profile.txt $py benchmarks/gpu_round_profile.py --device cuda \
    --data-root "$data" --workloads dfedpgp
