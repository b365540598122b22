export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; R=results/gpu-run-h200/2026-11-26-43c8bbe-call2; mkdir -p $R
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
MINITRANSFORMER_DEVICE=gpu timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider -x tests/test_graphs.py > $R/test_graphs.log 2>&1; echo "exit $?" >> $R/test_graphs.log; tail -3 $R/test_graphs.log; pack
timeout 70 python3 benchmarks/gpu_run.py --data-dir data/multi30k --out $R --stages env graph --minutes 6 > $R/phase.out 2>&1; tail -4 $R/summary.md; pack
timeout 150 python3 benchmarks/train_step.py --preset small base --steps 10 --warmup 2 --max-tokens 8192 --torch --device gpu --data-dir data/multi30k --cuda-graphs > $R/train_step.log 2>&1; tail -6 $R/train_step.log; pack
