#!/bin/bash
# Call 3: where the synced step's extra 2.5 ms goes (the host's part of a replayed step, the
# graph's launch call), with the recording's memory from MemoryAsyncPool (graph nodes) or a private pool;
# then the small step against PyTorch, synced one by one and pipelined (train_step.py's new figure).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/2026-11-26-a2cb008-call3; mkdir -p "$R"
for m in async private async private; do
    timeout 60 python3 results/gpu-run-h200/2026-11-26-pools.py $m 2>&1 | tail -1 | tee -a "$R/pools.jsonl"
done
timeout 150 python3 benchmarks/train_step.py --torch --device gpu --data-dir data/multi30k --max-tokens 8192 \
    --preset small --cuda-graphs --rounds 3 --steps 20 --json "$R/small-graphs.json" 2>&1 | tee "$R/small-graphs.log" | tail -4
