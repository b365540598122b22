"""A few updates of a tiny model, saved for tests/test_distributed.py to compare: run as one process
(`python tests/data_parallel_worker.py OUT.npz --accum 2`) or as ranks (`mpiexec -n 2 python
tests/data_parallel_worker.py OUT.npz --accum 1`), or as ranks in threads of one process (`--threads 2`).
Dropout is off unless --dropout is given, so one process and the ranks must agree to float32 rounding.
Rank 0 writes OUT.npz: "grad" (the flat gradient of the first update, summed over the ranks; rank
threads sum only each rank's part: ThreadWorld.sum_), "params" (the flat weights after it), "last" (after
--steps updates), "losses" (one per update). train() runs the updates, as it does in a real run.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minitransformer import backend  # noqa: E402
from minitransformer.run import distributed
from minitransformer.text.demo_task import make_splits  # noqa: E402
from minitransformer.text.corpus import encode_pairs  # noqa: E402
from minitransformer.run.pipeline import load_or_learn_tokenizer  # noqa: E402
from minitransformer.run.training import Trainer, TrainingConfig  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402

TRAINERS = {}   # rank -> its Trainer (rank threads: all of this process's)


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
    first, TRAINERS[distributed.world().rank] = {}, trainer

    def after_update(trainer):   # the flat buffers after each update (train() calls it)
        (flat,) = trainer.optimizer.flat.values()
        if trainer.step == 1:    # the gradient buffer keeps the update's sum (ranks that share the update:
            first.update(grad=backend.to_numpy(flat["grad"]).copy(),  # in each rank's own part only)
                         params=backend.to_numpy(flat["data"]).copy())
        if trainer.step + 1 == args.fail_step and distributed.world().rank == args.fail_rank:
            raise RuntimeError(f"rank {args.fail_rank} failed on purpose before update {trainer.step + 1}")
    trainer.callbacks.append(after_update)
    trainer.train()
    if distributed.world().is_main:
        losses = [trainer.losses[s] for s in sorted(trainer.losses)]
        (flat,) = trainer.optimizer.flat.values()
        one_copy = all(next(iter(t.optimizer.flat.values()))[k] is flat[k] for t in TRAINERS.values()
                       for k in ("data", "m", "v"))             # rank threads: every rank's are rank 0's buffers
        np.savez(args.out, losses=np.array(losses), last=backend.to_numpy(flat["data"]), one_copy=one_copy, **first)


if __name__ == "__main__":
    sys.exit(distributed.run_main(main))
