#!/bin/bash
# Every GPU check of the repository in one command, sized for a short lease of a GPU machine:
# each step has its own time limit and the whole script a deadline (DEADLINE_S seconds, default
# 540; 15 minutes of GPU time is typical here, start-up included). A step gets the smaller of its
# limit and the time left, is skipped with a line when under 20 s are left, and is interrupted
# with SIGINT at its limit (the smoke test still writes its report).
#
#   benchmarks/gpu_checks.sh OUT_DIR [DATA_ROOT]     # DATA_ROOT: default ../shared/data
#
# Steps, in priority order (STEPS=a,b,... runs a subset, in this order):
#   rounds     benchmarks/captured_round.py: bench workloads' rounds, eager vs engine.cuda_graphs
#   bench      fedpart bench --device cuda (round times, batched/ceiling, ops and syncs per round)
#   evalpass   benchmarks/evaluation_pass.py: every client's evaluation client by client vs one pass
#   fold       benchmarks/fold_check.py: whether CUDA's index_add_ adds in client order (one-operator average)
#   quickstart `fedpart compare configs/quickstart.yaml engine.device=DEVICE` (the README's quick
#              start on the device; its wall time against the same command on a CPU)
#   pfl        pfl-research side by side on its CIFAR-10 protocol (skipped without `import pfl`)
#   captured   benchmarks/captured_step.py: a batched step as one captured CUDA graph
#   conv       benchmarks/grouped_conv.py: grouped convolutions per cuDNN setting / formulation
#   dispfl     benchmarks/dispfl_rounding.py: Dis-PFL's quick start on the GPU (seeds 0-2, +1 ulp)
#   smoke      the pytest device checks (benchmarks/gpu_smoke.py) and kill-and-resume
#   gap        benchmarks/gpu_batched_gap.py
#   profile    benchmarks/gpu_round_profile.py (DFedPGP; PROFILE_ARGS adds arguments, e.g.
#              "--workloads fedper,dfedpgp --captured")
#   repro      the paper-budget reproductions, in the order REPRO lists them (entries separated by
#              ';', each "SCRIPT ARGS": benchmarks/SCRIPT/reproduce.py ARGS; default Pa3dFL as
#              it is now, with the study's step limit, and HeteroFL without its Scaler at the
#              paper's budget: 500 rounds x 20 clients x 5 local epochs; the "budget"
#              experiment's own Pa3dFL run is the method from before issue 22, which diverges
#              at 5 epochs), with whatever time is left: each run on the device
#              (engine.device, engine.backend=auto, a checkpoint every 5 rounds) into
#              REPRO_RUNS (default OUT_DIR/repro-runs), resumed from there by the next lease when
#              the previous lease's run directories are put back there; the records the scripts
#              write are copied to OUT_DIR/records/SCRIPT.
# Everything goes to OUT_DIR (env.txt, one log or report per step) and, when ARCHIVE names a
# file, into that one archive too (a lease returns few files). Record them in
# docs/results/gpu.md with the GPU's name.
set -u
if [ $# -lt 1 ]; then
    echo "usage: benchmarks/gpu_checks.sh OUT_DIR [DATA_ROOT]" >&2
    exit 2
fi
out=$1
data=${2:-../shared/data}
deadline=$((SECONDS + ${DEADLINE_S:-540}))
steps=",${STEPS:-rounds,bench,evalpass,fold,quickstart,pfl,captured,conv,dispfl,smoke,gap,profile,repro},"
dev=${DEVICE:-cuda}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
step() {  # step NAME SECONDS LOG COMMAND...: run with a limit, output to LOG and the terminal
    local name=$1 limit=$2 log=$3 t0=$SECONDS left=$((deadline - SECONDS))
    shift 3
    [[ $steps == *",$name,"* ]] || return 0
    if [ "$left" -lt 20 ]; then
        echo "[gpu_checks] $name: skipped, ${left} s left of the deadline" | tee -a "$out/skipped.txt"
        return 0
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    timeout -s INT -k 20 "$limit" "$@" 2>&1 | tee -a "$out/$log"
    echo "[gpu_checks] $name: $((SECONDS - t0)) s (limit $limit s)" | tee -a "$out/steps.txt"
}
$py -c "
from fedpart.bench.devices import check_device
from fedpart.errors import FedpartError
try:
    check_device('$dev')
except FedpartError as exc:
    raise SystemExit(f'error: {exc}')
" || exit 2
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null
    $py -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"
} 2>&1 | tee "$out/env.txt"
step rounds "${ROUNDS_S:-120}" rounds.md $py benchmarks/captured_round.py --device "$dev" \
    --data-root "$data" --rounds 3 --workloads fedper,fedavg,dfedpgp
step bench "${BENCH_S:-150}" bench.log $py -m fedpart.cli bench --device "$dev" --data-root "$data" \
    --repeats 3 ${BENCH_WORKLOADS:+--workloads "$BENCH_WORKLOADS"} --out "$out/gpu-bench.md"
step evalpass "${EVALPASS_S:-45}" evalpass.md $py benchmarks/evaluation_pass.py --device "$dev" \
    --data-root "$data"
step fold "${FOLD_S:-30}" fold.log $py benchmarks/fold_check.py --device "$dev"
step quickstart "${QUICKSTART_S:-150}" quickstart.log $py -m fedpart.cli compare \
    configs/quickstart.yaml "engine.device=$dev" "output.dir=$out/../quickstart-runs/{algorithm}" \
    ${QUICKSTART_SET:-}
if $py -c "import pfl" 2>/dev/null; then
    step pfl "${PFL_S:-110}" pfl.md $py benchmarks/pfl_side_by_side.py --device "$dev" \
        --settings defaults --iterations "${PFL_ITERATIONS:-20}" --repeats 1
fi
step captured "${CAPTURED_S:-60}" captured.md $py benchmarks/captured_step.py --device "$dev"
step conv "${CONV_S:-45}" conv.md $py benchmarks/grouped_conv.py --device "$dev"
dispfl="for s in 0 1 2; do $py benchmarks/dispfl_rounding.py --device $dev --seed \$s"
dispfl+=" --out '$out/dispfl-$dev-s'\$s.npz || exit 1; done; $py benchmarks/dispfl_rounding.py"
dispfl+=" --device $dev --seed 0 --perturb --out '$out/dispfl-$dev-s0-ulp.npz'"
step dispfl "${DISPFL_S:-90}" dispfl.log bash -c "$dispfl"
step smoke "${SMOKE_S:-270}" smoke.log $py benchmarks/gpu_smoke.py --device "$dev" --rounds 3 \
    --kill-rounds 8 --skip timing ${SMOKE_METHODS:+--methods "$SMOKE_METHODS"} --out "$out/gpu-smoke.md"
step gap "${GAP_S:-40}" gap.txt $py benchmarks/gpu_batched_gap.py --device "$dev"
step profile "${PROFILE_S:-90}" profile.txt $py benchmarks/gpu_round_profile.py --device "$dev" \
    --data-root "$data" --workloads dfedpgp ${PROFILE_ARGS:-}
repro_runs=${REPRO_RUNS:-$out/repro-runs}
paper_runs=pa3dfl-e5g-hetero-seed0,heterofl-noscaler-e5-hetero-seed0
IFS=';' read -ra queue <<< "${REPRO:-pa3dfl --scale paper --only e5,budget --runs $paper_runs}"
for entry in "${queue[@]}"; do
    read -ra words <<< "$entry"
    [ ${#words[@]} -gt 0 ] || continue
    script=${words[0]}
    started=$(date +%s)
    step repro "${REPRO_S:-100000}" repro.log $py "benchmarks/$script/reproduce.py" \
        "${words[@]:1}" --jobs 1 --data-root "$data" --out "$repro_runs/$script" \
        --set "engine.device=$dev" engine.backend=auto output.checkpoint_every=5
    mkdir -p "$out/records/$script"
    find "benchmarks/$script/results" -name '*.json' -newermt "@$started" \
        -exec cp {} "$out/records/$script/" \; 2>/dev/null
done
if [ -d "$repro_runs" ] && [ "$repro_runs" != "$out/repro-runs" ]; then
    rm -rf "$out/repro-runs" && cp -r "$repro_runs" "$out/repro-runs"  # archived with the rest
fi
if [ -n "${ARCHIVE:-}" ]; then
    tar -czf "$ARCHIVE" -C "$(dirname "$out")" "$(basename "$out")" && echo "[gpu_checks] archive: $ARCHIVE"
fi
