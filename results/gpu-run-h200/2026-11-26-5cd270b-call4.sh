# Call 4: column sums and the embedding's unrolled run on the GPU: their tests, then train_step
# small and base against PyTorch, eager and replayed, and the replayed small step kernel by kernel
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; R=results/gpu-run-h200/2026-11-26-5cd270b-call4; mkdir -p $R
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
MINITRANSFORMER_DEVICE=gpu timeout 90 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 tests/test_kernels.py tests/test_graphs.py > $R/tests.log 2>&1; echo "exit $?" >> $R/tests.log; tail -3 $R/tests.log; pack
TS="python3 benchmarks/train_step.py --preset small base --steps 10 --warmup 2 --max-tokens 8192 --torch --device gpu --data-dir data/multi30k"
timeout 100 $TS > $R/train_step.log 2>&1; tail -4 $R/train_step.log; pack
timeout 100 $TS --cuda-graphs > $R/train_step_graphs.log 2>&1; tail -4 $R/train_step_graphs.log; pack
timeout 50 python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k --preset small --cuda-graphs --no-torch --top 30 > $R/small-graphs.md 2> $R/small-graphs.err; grep "^## " $R/small-graphs.md; pack
