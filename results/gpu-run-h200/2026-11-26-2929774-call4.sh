#!/bin/bash
# Call 4: the whole GPU run at commit 2929774 (benchmarks/gpu_session.sh): versions, the
# fused-kernel tests, fused ops, profile, the graph stage, train_step (FP32 and TF32, eager and replayed,
# each synced step by step and pipelined), the replayed small step's kernels, the small step against
# PyTorch in 3 alternating rounds; then the suite on CuPy beside Multi30k with --cuda-graphs.
KIND=h200 END=${END:-470} R=results/gpu-run-h200/2026-11-26-2929774-call4 bash benchmarks/gpu_session.sh
