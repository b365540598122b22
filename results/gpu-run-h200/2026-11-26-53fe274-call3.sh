#!/bin/bash
# The third device call at 53fe274: the CUDA-graph probe again (call 2's stopped at an import), and what
# mpiexec says on this machine (call 2's 2-rank test failed with Open MPI's banner as its last line).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=results/gpu-run-h200/2026-11-26-53fe274-call${CALL:-3}; OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$R" "$OUT"
timeout 60 python3 benchmarks/gpu_run.py --data-dir data/multi30k --out "$R" --stages env graph --minutes 12 \
  > "$R/gpu_run.out" 2>&1; echo "gpu_run exit $?"; tail -3 "$R/gpu_run.out"
{ whoami; which mpiexec; mpiexec --version; timeout 60 python3 -c "
from minitransformer import distributed; import subprocess, sys
cmd = distributed.mpiexec_command(2) + [sys.executable, '-c', 'from mpi4py import MPI; print(MPI.COMM_WORLD.rank)']
print(cmd); r = subprocess.run(cmd, capture_output=True, text=True); print(r.returncode, r.stdout, r.stderr[-3000:])"; } > "$R/mpiexec.log" 2>&1
tail -30 "$R/mpiexec.log"
tar czf "$OUT/r.tgz" "$R"
