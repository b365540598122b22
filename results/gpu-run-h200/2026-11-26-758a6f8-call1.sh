#!/bin/bash
# Call 1: fewer kernels in the step (leaf gradients added into Adam's buffers by the GEMM that
# makes them, beta 1, and by the column sums; attention's scale and mask in one launch, its softmax backward
# taking the 1/sqrt(d_k); ReLU's backward in one): the tests that touch them on the GPU, the replayed small
# step's kernels, and the small step against PyTorch in rounds.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/2026-11-26-758a6f8-call1; mkdir -p "$R"
MINITRANSFORMER_DEVICE=gpu timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_kernels.py \
    tests/test_attention.py tests/test_graphs.py tests/test_transformer.py tests/test_functional.py tests/test_tensor.py \
    tests/test_training.py > "$R/tests.log" 2>&1
echo "tests exit $?"; grep -E "^FAILED|passed|failed" "$R/tests.log" | tail -12
timeout 60 python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k --preset small --cuda-graphs --top 40 \
    --json "$R/kernel_profile.json" > "$R/kernel_profile.md" 2>&1; grep "^## " "$R/kernel_profile.md"
grep -E "column_sum|cupy_copy|cupy_add|mt_" "$R/kernel_profile.md" | head -8
timeout 110 python3 benchmarks/train_step.py --torch --device gpu --data-dir data/multi30k --max-tokens 8192 \
    --preset small --cuda-graphs --rounds 3 --steps 20 --json "$R/small-graphs.json" 2>&1 | tee "$R/small-graphs.log" | tail -3
