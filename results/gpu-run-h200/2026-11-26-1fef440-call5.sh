# Call 5 (the last of its 15 minutes): the suite on CuPy beside Multi30k trained with --cuda-graphs,
# then train_step small and base against PyTorch: FP32 and TF32, replayed and eager
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; R=results/gpu-run-h200/2026-11-26-1fef440-call5; mkdir -p $R/m30k
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
( while sleep 20; do pack; done ) & PACKER=$!
timeout 140 python3 benchmarks/gpu_run.py --data-dir data/multi30k --out $R/m30k --run-dir runs/m30k --stages multi30k \
    --cuda-graphs --minutes 4.5 > $R/m30k.out 2>&1 & M30K=$!
MINITRANSFORMER_DEVICE=gpu timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider -n 12 --timeout 100 \
    tests --ignore tests/test_gpu_run.py > $R/suite.log 2>&1; echo "suite exit $?"; tail -4 $R/suite.log
wait $M30K; tail -3 $R/m30k/multi30k.log; pack
TS="python3 benchmarks/train_step.py --preset small base --steps 10 --warmup 2 --max-tokens 8192 --torch --device gpu --data-dir data/multi30k"
for mode in "fp32_graphs --cuda-graphs" "fp32" "tf32_graphs --cuda-graphs --tf32" "tf32 --tf32"; do
    set -- $mode; name=$1; shift
    timeout 34 $TS "$@" > $R/train_step_$name.log 2>&1; echo "== $name"; grep "ms/step" $R/train_step_$name.log; pack
done
kill $PACKER; pack
