#!/bin/bash
# Call 3: the small and base training steps against PyTorch eager, rounds alternating in one run
# (ours, PyTorch, ours, ...), so that the ratio is not one run's luck; FP32, 8,192-token batches.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/2026-11-26-f2fa3d3-call3; mkdir -p "$R"
B="python3 benchmarks/train_step.py --torch --device gpu --data-dir data/multi30k --max-tokens 8192"
timeout 200 $B --preset small --cuda-graphs --rounds 5 --steps 20 --json "$R/small-graphs.json" 2>&1 | tee "$R/small-graphs.log" | tail -8
timeout 120 $B --preset small --rounds 3 --steps 20 --json "$R/small-eager.json" 2>&1 | tee "$R/small-eager.log" | tail -6
timeout 100 $B --preset base --cuda-graphs --rounds 2 --steps 6 --json "$R/base-graphs.json" 2>&1 | tee "$R/base-graphs.log" | tail -6
