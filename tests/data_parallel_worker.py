"""A few updates of a tiny model, saved for tests/test_distributed.py to compare: run as one process
(`python tests/data_parallel_worker.py OUT.npz --accum 2`) or as ranks (`mpiexec -n 2 python
tests/data_parallel_worker.py OUT.npz --accum 1`), or as ranks in threads of one process (`--threads 2`).
Dropout is off unless --dropout is given, so one process and the ranks must agree to float32 rounding.
Rank 0 writes OUT.npz: "grad" (the flat gradient of the first update, summed over the ranks), "params"
(the flat weights after --steps updates), "losses" (one per update).
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
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1, help="ranks as threads of this process (distributed.run_threads)")
    args = p.parse_args()
    if args.threads > 1 and distributed.world().size == 1:
        return distributed.run_threads(main, (), args.threads)
    distributed.world().bind_device()   # on the GPU backend (MINITRANSFORMER_DEVICE=gpu): one GPU per rank
    (src, tgt), _, _ = make_splits(400, 10, 10, seed=0)
    tokenizer, _ = load_or_learn_tokenizer((src, tgt), None, 300, None, log=lambda message: None)
    pairs, _ = encode_pairs(src, tgt, tokenizer)
    backend.seed(0)
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, dropout=args.dropout))
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
