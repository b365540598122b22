"""A few updates of a tiny model, saved for tests/test_distributed.py to compare: run as one process
(`python tests/data_parallel_worker.py OUT.npz --accum 2`) or as ranks (`mpiexec -n 2 python
tests/data_parallel_worker.py OUT.npz --accum 1`). Dropout is off, so the two must agree to float32
rounding. Rank 0 writes OUT.npz: "grad" (the flat gradient of the first update, summed over the
ranks), "params" (the flat weights after --steps updates), "losses" (one per update).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minitransformer import backend, distributed  # noqa: E402
from minitransformer.demo_task import make_splits  # noqa: E402
from minitransformer.corpus import encode_pairs  # noqa: E402
from minitransformer.pipeline import load_or_learn_tokenizer  # noqa: E402
from minitransformer.training import Trainer, TrainingConfig  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--accum", type=int, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--fail-rank", type=int)
    p.add_argument("--fail-step", type=int, default=2)
    args = p.parse_args()
    distributed.world().bind_device()   # on the GPU backend (MINITRANSFORMER_DEVICE=gpu): one GPU per rank
    (src, tgt), _, _ = make_splits(400, 10, 10, seed=0)
    tokenizer, _ = load_or_learn_tokenizer((src, tgt), None, 300, None, log=lambda message: None)
    pairs, _ = encode_pairs(src, tgt, tokenizer)
    backend.seed(0)
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, dropout=0.0))
    trainer = Trainer(model, tokenizer, pairs, None, TrainingConfig(steps=args.steps, max_tokens=128,
                      accum=args.accum, warmup_steps=2, progress=False), log=lambda message: None)
    (flat,) = trainer.optimizer.flat.values()
    losses, grad = [], None
    for step in range(1, args.steps + 1):
        if step == args.fail_step and distributed.world().rank == args.fail_rank:
            raise RuntimeError(f"rank {args.fail_rank} failed on purpose before update {step}")
        loss, _ = trainer.train_step()
        losses.append(float(loss))
        if grad is None:
            grad = backend.to_numpy(flat["grad"]).copy()  # the buffer keeps the last update's gradient
            params = backend.to_numpy(flat["data"]).copy()
    if distributed.world().is_main:
        np.savez(args.out, grad=grad, params=params, losses=np.array(losses))


if __name__ == "__main__":
    sys.exit(distributed.run_main(main))
