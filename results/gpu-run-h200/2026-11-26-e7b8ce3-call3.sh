# Call 3: the small and base steps kernel by kernel on the GPU's clock (ours eager, ours replayed, PyTorch eager)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; R=results/gpu-run-h200/2026-11-26-e7b8ce3-call3; mkdir -p $R
pack() { tar czf "$OUT/.r.tgz" "$R" 2>/dev/null; mv "$OUT/.r.tgz" "$OUT/r.tgz"; }
P="python3 benchmarks/gpu_kernel_profile.py --data-dir data/multi30k"
timeout 100 $P --preset small --top 45 --json $R/small.json > $R/small.md 2> $R/small.err; pack
timeout 60 $P --preset small --cuda-graphs --no-torch --top 45 --json $R/small-graphs.json > $R/small-graphs.md 2> $R/small-graphs.err; pack
timeout 100 $P --preset base --top 30 --json $R/base.json > $R/base.md 2> $R/base.err; pack
grep -h "^## " $R/*.md; tail -2 $R/*.err
