#!/bin/bash
# The whole GPU run inside one device call of under 10 minutes (session 14's, 15 minutes of device time):
#   phase 1, alone: versions, the fused-kernel tests, fused ops, the small step's profile, the CUDA-graph
#   probe, train_step against PyTorch (gpu_run.py --stages env kernels fused profile graph train_step), then
#   the replayed small step's kernels on the GPU's clock (gpu_kernel_profile.py) and the replayed small step
#   against PyTorch in 3 alternating rounds (train_step.py --rounds 3);
#   phase 2: the whole suite on CuPy (pytest-xdist) beside Multi30k on the GPU recipe (with --cuda-graphs
#   where phase 1's graph stage found the replayed steps giving the eager steps' bits).
# Results in results/gpu-run-$KIND (README: copy Multi30k into data/multi30k, carry "data"); packed into
# $OUT/r.tgz every 30 s, so a call cut short still returns what was done. END: seconds for the whole call.
#   bash benchmarks/gpu_session.sh            # as the device tool's command, with carry ["data"]
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$(date +%s); END=${END:-540}; R=${R:-results/gpu-run-${KIND:-gpu}}; OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$R" "$OUT"
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
( while sleep 30; do pack; done ) & PACKER=$!
python3 benchmarks/gpu_run.py --data-dir data/multi30k --out "$R" --stages env kernels fused profile graph train_step \
    --minutes 12 2>&1 | tee "$R/phase1.out"
pack
# the replayed small step kernel by kernel on the GPU's clock, beside PyTorch's (PyTorch's profiler)
timeout 60 python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k --preset small --cuda-graphs --top 40 \
    --json "$R/kernel_profile.json" > "$R/kernel_profile.md" 2>&1; grep "^## " "$R/kernel_profile.md"; pack
# the replayed small step against PyTorch eager in alternating rounds: one run's pair moves with either side's luck
timeout 120 python3 benchmarks/train_step.py --torch --device gpu --data-dir data/multi30k --max-tokens 8192 --preset small \
    --cuda-graphs --rounds 3 --steps 20 --json "$R/small-graphs-rounds.json" > "$R/small-graphs-rounds.log" 2>&1
tail -3 "$R/small-graphs-rounds.log"; pack
left=$(( END - 15 - ($(date +%s) - T0) )); echo "phase 2: $left s"
mkdir -p "$R/m30k"
# Multi30k with --cuda-graphs where the graph stage found the replayed steps equal to the eager ones
CG=$(python3 -c "import json; g = json.load(open('$R/results.json'))['stages'].get('graph', {}).get('result', {})
print('--cuda-graphs' if g.get('losses equal') and g.get('weights equal') else '')" 2>/dev/null)
echo "multi30k: ${CG:-eager steps}"
python3 benchmarks/gpu_run.py --data-dir data/multi30k --out "$R/m30k" --run-dir runs/m30k --stages multi30k $CG \
    --minutes "$(python3 -c "print($left / 60)")" > "$R/m30k.out" 2>&1 & M30K=$!
MINITRANSFORMER_DEVICE=gpu timeout $((left - 5)) python3 -m pytest -q -rfE -p no:cacheprovider -n 12 --timeout 150 \
    tests > "$R/suite.log" 2>&1
echo "suite exit $?"; tail -3 "$R/suite.log"
wait $M30K; tail -5 "$R/m30k/multi30k.log"
kill $PACKER; pack
