#!/bin/bash
# Call 4: fewer kernels in the step (column sums in one launch; attention's heads copied once per
# projection, its backward's GEMMs writing into C-ordered arrays copied once per projection): the tests that
# touch them on the GPU, the replayed small step's kernels, and the small step against PyTorch in rounds.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=${OUT:-/tmp/out}/2026-11-26-63cd4c9-call4; mkdir -p "$R"
MINITRANSFORMER_DEVICE=gpu timeout 100 python3 -m pytest -q -p no:cacheprovider -x tests/test_kernels.py \
    tests/test_attention.py tests/test_graphs.py tests/test_transformer.py > "$R/tests.log" 2>&1
echo "tests exit $?"; tail -2 "$R/tests.log"
timeout 60 python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k --preset small --cuda-graphs --top 40 \
    --json "$R/kernel_profile.json" > "$R/kernel_profile.md" 2>&1; grep "^## " "$R/kernel_profile.md"
grep -E "column_sum|cupy_copy|cupy_add" "$R/kernel_profile.md" | head -5
timeout 110 python3 benchmarks/train_step.py --torch --device gpu --data-dir data/multi30k --max-tokens 8192 \
    --preset small --cuda-graphs --rounds 3 --steps 20 --json "$R/small-graphs.json" 2>&1 | tee "$R/small-graphs.log" | tail -3
