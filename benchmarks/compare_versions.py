"""A/B timing of two versions of the package in ONE process, interleaved: the working tree against a
git revision (default HEAD), so that machine noise hits both alike. Use it before and after any
change that could touch speed, and report the ratio.

    python benchmarks/compare_versions.py                       # working tree vs HEAD
    python benchmarks/compare_versions.py --base 7b531d2 --repeats 15 --preset small
    python benchmarks/compare_versions.py --base HEAD~1 --preset small --only 64 --repeats 5
                                                                # decoding only

Seven workloads, each timed alternately (A, B, A, B, ...): one update as the recipe trains on a CPU
(2 rank threads of one process, Trainer.train_step on 1,024 tokens each, the gradients summed, one
shared copy of the weights; --preset small is the recipe's model), a training step of a preset
(forward, label-smoothed loss, backward, Adam update) on fixed Multi30k-shaped batches of random
ids, the Trainer's own step around it (batch stream, weighting, seeding, schedule;
2,048-token batches), one Adam update of all the preset's parameters, the engine's overhead per node
(a chain of relu(h * w + b) on (16, 16) float32, as benchmarks/engine_overhead.py), and greedy and
beam-4 decoding of 64 random sources of Multi30k-like lengths by the preset, every output run to its
maximum length (</s> pushed down, as in benchmarks/decode_speed.py).
The revision is exported with `git archive` into a temporary directory and imported under another
package name; the package imports itself only relatively, so both copies live side by side.
"""
import argparse
import importlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def import_revision(rev, where):
    """The package as of git revision `rev`, imported as minitransformer_base."""
    run = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "minitransformer"],
                         capture_output=True)
    if run.returncode != 0:
        reason = (run.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"compare_versions.py: error: --base {rev}: git archive cannot export "
                         f"minitransformer/ from it ({reason})")
    tar = run.stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(where, filter="data")
    (Path(where) / "minitransformer").rename(Path(where) / "minitransformer_base")
    sys.path.insert(0, where)
    return importlib.import_module("minitransformer_base")


def training_step(mt, preset, vocab, batch_shapes, seed=0):
    """A closure running one update of `preset` on fixed random batches, with package `mt`."""
    mt.backend.seed(seed)
    config = getattr(mt.transformer.TransformerConfig, preset)(vocab_size=vocab)
    model = mt.transformer.Transformer(config)
    adam = mt.optim.Adam(model.parameters(), lr=1e-4)
    rng = np.random.default_rng(seed)
    batches = [mt.data.Batch([(rng.integers(3, vocab, s).tolist(),
                               rng.integers(3, vocab, t).tolist())
                              for _ in range(b)], 0, 1, 2) for b, s, t in batch_shapes]
    state = {"i": 0}

    def step():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = mt.functional.cross_entropy(logits, batch.tgt_out, ignore_index=0,
                                           label_smoothing=0.1)
        loss.backward()
        adam.step()
        adam.zero_grad()
    return step


def module(mt, *names):
    """The first of `names` (dotted, inside package mt) that this version of the package has: a
    module moved between versions is found under its old name and its new one."""
    for name in names:
        try:
            return importlib.import_module(f"{mt.__name__}.{name}")
        except ModuleNotFoundError:
            continue
    raise SystemExit(f"compare_versions.py: error: {mt.__name__} has none of {', '.join(names)}")


def random_pairs(vocab, seed, n_pairs):
    """n_pairs (source ids, target ids) of random ids, lengths as Multi30k's (3-50)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(6.0, 2.6, (n_pairs, 2)).round(), 3, 50).astype(int)
    return [(rng.integers(3, vocab, s).tolist(), rng.integers(3, vocab, t).tolist())
            for s, t in lengths]


def rank_threads_update(mt, preset, vocab, ranks=2, seed=0, n_pairs=3000):
    """A closure running one update of the recipe's CPU path (examples/multi30k.py): `ranks` rank
    threads of one process (distributed.run_threads), each running Trainer.train_step on its share
    of a 2,048-token update (pre-LN, dropout 0.2, label smoothing 0.2), the gradients summed, one
    shared copy of the weights with each rank updating its part. The Trainers are built
    at the first call."""
    distributed = module(mt, "run.distributed", "distributed")
    training = module(mt, "run.training", "training")
    module(mt, "run.host", "backend").keep_freed_memory()     # as the Trainer does when it trains
    pairs = random_pairs(vocab, seed, n_pairs)
    trainers = [None] * ranks

    def main():
        world = distributed.world()
        if trainers[world.rank] is None:
            mt.backend.seed(seed)
            config = getattr(mt.transformer.TransformerConfig, preset)(
                vocab_size=vocab, norm_first=True, dropout=0.2, label_smoothing=0.2)
            settings = training.TrainingConfig(steps=10**6, max_tokens=2048 // ranks,
                                               warmup_steps=4000, progress=False)
            trainer = training.Trainer(mt.transformer.Transformer(config), None, pairs, None,
                                       settings, world=world)
            for flat in trainer.optimizer.flat.values():
                world.broadcast_(flat["data"])
            trainer._shared = world.share_(trainer.optimizer)   # as Trainer.train does
            trainers[world.rank] = trainer
        trainers[world.rank].train_step()
        return 0
    return lambda: distributed.run_threads(main, (), ranks)


def trainer_step(mt, preset, vocab, seed=0, n_pairs=3000):
    """A closure running Trainer.train_step (the batch stream, token weighting, dropout seeding,
    Adam and the schedule around the same model step) on random pairs of Multi30k-like lengths."""
    mt.backend.seed(seed)
    model = mt.transformer.Transformer(getattr(mt.transformer.TransformerConfig,
                                               preset)(vocab_size=vocab))
    pairs = random_pairs(vocab, seed, n_pairs)
    training = module(mt, "run.training", "training")
    training_config = training.TrainingConfig(steps=10**6, max_tokens=2048, warmup_steps=4000,
                                              progress=False)
    trainer = training.Trainer(model, None, pairs, None, training_config)
    return trainer.train_step


def adam_update(mt, preset, vocab, seed=0):
    """A closure running one Adam update of every parameter of `preset` (gradients fixed, random),
    the gradients handed over as backward() hands them over."""
    mt.backend.seed(seed)
    model = mt.transformer.Transformer(getattr(mt.transformer.TransformerConfig,
                                               preset)(vocab_size=vocab))
    params = model.parameters()
    adam = mt.optim.Adam(params, lr=1e-4)
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]

    def step():
        for p, g in zip(params, grads):   # what backward() does at a leaf, in either version
            buffer = getattr(p, "grad_buffer", None)
            if buffer is None:
                p.grad = g.astype(p.dtype, copy=True)
            else:
                buffer[...] = g
                p.grad = buffer
        adam.step()
        adam.zero_grad()
    return step


def engine_chain(mt, depth=100, size=16):
    """A closure building and back-propagating a chain of `depth` relu(h * w + b) blocks."""
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((size, size)).astype(np.float32), requires_grad=True)
    # no overflow
    w = mt.tensor((0.5 * rng.standard_normal((size, size))).astype(np.float32), requires_grad=True)
    b = mt.tensor(rng.standard_normal((size, size)).astype(np.float32), requires_grad=True)

    def step():
        h = x
        for _ in range(depth):
            h = (h * w + b).relu()
        h.sum().backward()
    return step


def decoding(mt, preset, vocab, beam_size, seed=0, n=64):
    """A closure translating n random sources (lengths as Multi30k's, 3-40 ids) by greedy search
    (beam_size 1) or beam search, with the key/value cache; every output runs to len(x) + 50."""
    from decode_speed import NoEOS
    mt.backend.seed(seed)
    model = NoEOS(mt.transformer.Transformer(getattr(mt.transformer.TransformerConfig,
                                                     preset)(vocab_size=vocab)))
    rng = np.random.default_rng(seed)
    sources = [rng.integers(3, vocab, s).tolist()
               for s in np.clip(rng.gamma(6.0, 2.2, n).round(), 3, 40).astype(int)]
    search = importlib.import_module(f"{mt.__name__}.search")
    if beam_size == 1:
        return lambda: search.greedy_search(model, sources)
    if hasattr(search, "SearchConfig"):         # one SearchConfig; versions before it took keywords
        settings = search.SearchConfig(beam_size=beam_size, alpha=0.6)
        return lambda: search.beam_search(model, sources, settings)
    return lambda: search.beam_search(model, sources, beam_size=beam_size, alpha=0.6)


def interleaved(steps, repeats, warmup=2):
    """{name: [seconds, ...]} timing each closure in turn, `repeats` rounds
    after `warmup` rounds."""
    for _ in range(warmup):
        for fn in steps.values():
            fn()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="HEAD",
                   help="git revision to compare the working tree against (default: HEAD)")
    p.add_argument("--preset", default="tiny", choices=("tiny", "small", "base"),
                   help="default: tiny")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed rounds per workload (default: 10)")
    p.add_argument("--only", default="",
                   help="only the workloads whose name contains this text, e.g. 'beam'")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    check = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                            f"{args.base}^{{commit}}"],
                           capture_output=True)
    if check.returncode != 0 or args.base.startswith("-"):
        p.error(f"--base {args.base!r} is not a commit of the repository at {ROOT}")
    sys.path.insert(0, str(ROOT))
    import minitransformer as new
    with tempfile.TemporaryDirectory() as tmp:
        # (sentences, source length, target length)
        shapes = [(64, 16, 15), (40, 25, 24), (100, 10, 10)]
        workloads = {
            f"recipe update, 2 rank threads ({args.preset})":
                lambda m: rank_threads_update(m, args.preset, 8000),
            f"train step ({args.preset})": lambda m: training_step(m, args.preset, 8000, shapes),
            f"Trainer.train_step ({args.preset})": lambda m: trainer_step(m, args.preset, 8000),
            f"Adam update ({args.preset})": lambda m: adam_update(m, args.preset, 8000),
            "engine, per node of relu(h*w+b)": lambda m: engine_chain(m),
            f"greedy, 64 sentences ({args.preset})": lambda m: decoding(m, args.preset, 8000, 1),
            f"beam 4, 64 sentences ({args.preset})": lambda m: decoding(m, args.preset, 8000, 4),
        }
        if not any(args.only in name for name in workloads):
            p.error(f"--only {args.only!r} is in no workload's name: {'; '.join(workloads)}")
        old = import_revision(args.base, tmp)
        print(f"working tree (B) vs {args.base} (A), interleaved, {args.repeats} rounds; median "
              f"[min, max]")
        for name, make in workloads.items():
            if args.only not in name:
                continue
            times = interleaved({"A": make(old), "B": make(new)}, args.repeats)
            per = 1 / 300 if name.startswith("engine") else 1.0   # 300 graph nodes per chain
            row = {k: [t * per for t in v] for k, v in times.items()}
            unit, scale = ("us", 1e6) if name.startswith("engine") else ("ms", 1e3)
            a, b = (statistics.median(row[k]) for k in "AB")
            print(f"  {name:34s} A {a * scale:8.1f} {unit} [{min(row['A']) * scale:.1f}, "
                  f"{max(row['A']) * scale:.1f}]   B {b * scale:8.1f} {unit} "
                  f"[{min(row['B']) * scale:.1f}, {max(row['B']) * scale:.1f}]   B/A {b / a:.3f}")


if __name__ == "__main__":
    main()
