#!/bin/bash
# Call 2: where the replayed step's idle GPU time falls (gpu_kernel_profile.py now reports the
# gaps between events), and whether the graph's memory nodes cost it (2026-11-26-pools.py, alternating).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/2026-11-26-0ec60f6-call2; mkdir -p "$R"
timeout 70 python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k --preset small --cuda-graphs --top 12 \
    --json "$R/kernel_profile.json" > "$R/kernel_profile.md" 2>&1; grep -E "^## |^Idle" "$R/kernel_profile.md"
for i in 1 2; do for m in async private; do
    timeout 60 python3 results/gpu-run-h200/2026-11-26-pools.py $m 2>&1 | tail -1 | tee -a "$R/pools.jsonl"
done; done
