#!/bin/bash
# The second device call at 53fe274 (H200): the fixes of the first call's three suite failures, the fused
# embedding backward (its test and the step), the host profile and the CUDA-graph probe with cuBLAS by
# ctypes, then train_step small and base against PyTorch (FP32), and small again after 10 warm-up steps.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=results/gpu-run-h200/2026-11-26-53fe274-call2; OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$R" "$OUT"
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
( while sleep 20; do pack; done ) & PACKER=$!
git log -1 --format=%H > "$R/commit.txt" 2>/dev/null
export MINITRANSFORMER_DEVICE=gpu
timeout 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 6 --timeout 120 tests/test_kernels.py \
  tests/test_cores.py::test_the_trainer_uses_every_core_while_it_trains \
  tests/test_scripts.py::test_train_step_ranks_share_each_batch tests/test_exercises.py > "$R/tests.log" 2>&1
echo "tests exit $?"; tail -3 "$R/tests.log"; pack
unset MINITRANSFORMER_DEVICE
timeout 90 python3 benchmarks/gpu_run.py --data-dir data/multi30k --out "$R" --stages env profile graph --minutes 12 \
  > "$R/gpu_run.out" 2>&1; echo "gpu_run exit $?"; pack
timeout 120 python3 benchmarks/train_step.py --preset small base --steps 10 --warmup 2 --max-tokens 8192 --torch \
  --device gpu --data-dir data/multi30k --json "$R/train_step.json" > "$R/train_step.log" 2>&1
echo "train_step exit $?"; cat "$R/train_step.log" | tail -8; pack
timeout 60 python3 benchmarks/train_step.py --preset small --steps 10 --warmup 10 --max-tokens 8192 \
  --device gpu --data-dir data/multi30k --json "$R/train_step_warm10.json" > "$R/train_step_warm10.log" 2>&1
echo "warm10 exit $?"; tail -3 "$R/train_step_warm10.log"
kill $PACKER; pack
