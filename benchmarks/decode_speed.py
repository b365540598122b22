"""Decoding speed: sentences per second of greedy search and beam search (beam 4, alpha 0.6) on the
Multi30k 2016 test set (German side), with the key/value cache and by recomputing the whole prefix
at every step.

    python benchmarks/decode_speed.py [--n 1000] [--batch-size 64] [--checkpoint ck.npz]
                                      [--device gpu] [--alpha 1.0] [--stop fast]

With --checkpoint, the trained model and its tokenizer translate the sentences as they are. Without,
a randomly initialised `small` model (D 256, 3 + 3 layers, --vocab ids) does, with words mapped to
ids by a hash (id = 3 + crc32(word) % (V - 3): no tokenizer to train) and </s> made very unlikely
(its logit lowered by 1e4), so every output runs to the maximum length, len(x) + 50 tokens, where
</s> is forced: a fixed, worst-case amount of work, the same for every method. Sentences are sorted
by length and cut into batches of --batch-size sentences; every batch is decoded by each method in
turn (so that a change in the machine's load touches all methods alike); the time covers encoding
and search, not tokenization. Recomputation is slow: it runs on --recompute-n sentences (whole
batches spread over all lengths), and its speed-up is measured against the cache on those same
sentences. Use --n to run on fewer sentences for a quick check. With the cache, the model's forward
passes are timed apart from the rest (the search's own work), so the floor of beam / greedy is
printed too. --stop fast: beam search's sooner stop (search.py); it changes nothing on the random
model, whose outputs all run to the maximum length. On a busy machine, OPENBLAS_NUM_THREADS=1 gives
steadier figures (a second BLAS thread that waits for a busy core slows small products down).
"""
import argparse
import sys
import time
import zlib
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import minitransformer as mt  # noqa: E402
from minitransformer import backend  # noqa: E402
from minitransformer.run.checkpoint import CheckpointError  # noqa: E402
from minitransformer.checks import SettingError, check_int  # noqa: E402
from minitransformer.text.fileio import read_lines  # noqa: E402
from minitransformer.config import STOPS, SearchConfig  # noqa: E402
from minitransformer.search import beam_search, greedy_search  # noqa: E402
from minitransformer.tensor import Tensor  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402

TEST = ROOT.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.de.gz"


class NoEOS:
    """The model, with the </s> logit lowered by `margin` at every step: outputs run to the maximum
    length (where search forces </s>, whose log-probability stays finite). Everything
    else is the model's."""

    def __init__(self, model, margin=1e4):
        self.model, self.margin = model, margin

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decode(self, *args, **kwargs):
        logits = self.model.decode(*args, **kwargs).data            # (B, T, V)
        logits[..., self.model.config.eos_id] -= self.margin
        return Tensor(logits)


class ForwardTimer:
    """The model, timing its forward passes (model.encode, and model.decode: the decoder's layers
    and the output projection; the device synchronised around each) and counting the decoder rows.
    What any search must pay; the rest of a search's time is its own work (log-softmax, selection,
    cache reorders, bookkeeping)."""

    def __init__(self, model):
        self.model, self.seconds, self.rows = model, 0.0, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def _timed(self, fn, *args, **kwargs):
        backend.synchronize()
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        backend.synchronize()
        self.seconds += time.perf_counter() - start
        return out

    def encode(self, *args, **kwargs):
        return self._timed(self.model.encode, *args, **kwargs)

    def decode(self, tgt_in, *args, **kwargs):
        self.rows += len(tgt_in)
        return self._timed(self.model.decode, tgt_in, *args, **kwargs)


def hash_ids(line, vocab_size):
    """Whitespace words -> ids in [3, V): a stable hash, no tokenizer."""
    return [3 + zlib.crc32(w.encode("utf-8")) % (vocab_size - 3) for w in line.split()]


def timed(fn):
    """(seconds, output tokens with </s>) of one call fn() -> Hypotheses (greedy) or
    n-best lists (beam)."""
    backend.synchronize()
    start = time.perf_counter()
    out = fn()
    backend.synchronize()
    seconds = time.perf_counter() - start
    return seconds, sum(len((h[0] if isinstance(h, list) else h).tokens) + 1 for h in out)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000, help="sentences (default: all 1,000)")
    p.add_argument("--recompute-n", type=int,
                   help="sentences for the slow runs without cache (default: --n)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: 64)")
    p.add_argument("--checkpoint", help="a trained checkpoint (default: a random small model)")
    p.add_argument("--vocab", type=int, help="vocabulary of the random model (default: 8000)")
    p.add_argument("--max-len-b", type=int, default=50,
                   help="outputs run to len(x) + this (default: 50)")
    p.add_argument("--alpha", type=float, default=0.6,
                   help="beam search's length penalty (default: 0.6)")
    p.add_argument("--stop", choices=STOPS, default="exact",
                   help="beam search's stop (default: exact)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--data", default=str(TEST),
                   help="source sentences (default: Multi30k test 2016, German)")
    args = p.parse_args()
    for option, value, low in (("--n", args.n, 1), ("--recompute-n", args.recompute_n, 1),
                               ("--vocab", args.vocab, 4)):
        if value is not None and value < low:
            p.error(f"{option} must be at least {low}, got {value}")
    if not Path(args.data).exists():
        p.error(f"--data {args.data} not found (the shared data directory is ../shared/data beside "
                f"the repo)")
    if args.checkpoint and args.vocab is not None:
        p.error("--vocab sets the random model's vocabulary; a --checkpoint brings its own: give "
                "one or the other")
    args.vocab = args.vocab or 8000
    for option, path in (("--data", args.data), ("--checkpoint", args.checkpoint)):
        if path is not None and not Path(path).is_file():
            p.error(f"{option} {path} is not a file")
    try:
        search = SearchConfig(beam_size=4, alpha=args.alpha, max_len_b=args.max_len_b,
                              stop=args.stop)
        check_int("decode_speed", "batch_size", args.batch_size, 1)
    except SettingError as e:
        p.error(e.renamed({"alpha": "--alpha", "max_len_b": "--max-len-b",
                           "batch_size": "--batch-size"}))
    try:
        backend.use(args.device)
        lines = read_lines(args.data)[:args.n]
        if not lines:
            raise ValueError(f"--data {args.data} holds no line to translate")
        if args.checkpoint:
            from minitransformer.run.translation import load_model
            model, tok, _ = load_model(args.checkpoint)
    except (ValueError, RuntimeError, CheckpointError) as e:
        # a device, a file or a checkpoint that will not do
        raise SystemExit(f"{p.prog}: error: {e}") from None
    mt.seed(0)
    if args.checkpoint:
        sources = [[i for i in tok.encode(s) if i > 2] for s in lines]
        what = f"checkpoint {args.checkpoint}"
    else:
        model = NoEOS(Transformer(TransformerConfig.small(vocab_size=args.vocab)))
        sources = [hash_ids(s, args.vocab) for s in lines]
        what = f"random small model (V {args.vocab}), </s> only at the maximum length"
    model = ForwardTimer(model)
    methods = {"greedy": lambda s, c: greedy_search(model, s, search, use_cache=c),
               "beam 4": lambda s, c: beam_search(model, s, search, use_cache=c)}
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches = [[sources[j] for j in order[i:i + args.batch_size]]
               for i in range(0, len(order), args.batch_size)]
    # recomputation is slow: run it on every stride-th batch (all lengths represented)
    n_slow = -(-(args.n if args.recompute_n is None else args.recompute_n) // args.batch_size)
    stride = max(1, len(batches) // max(1, n_slow))
    slow = set(range(0, len(batches), stride)[:n_slow])
    print(f"{what}; {len(sources)} sentences, {sum(map(len, sources)) / len(sources):.1f} source "
          f"tokens on average; {len(batches)} batches of up to {args.batch_size}, {len(slow)} of "
          f"them also decoded without the cache; device {args.device}")
    for fn in methods.values():  # warm-up
        fn(batches[0][:2], True), fn(batches[0][:2], False)
    # each batch is decoded by every method in turn, so
    # that a change in the machine's load hits all alike
    seconds, tokens, sentences, forward, rows = {}, {}, {}, {}, {}
    for i, batch in enumerate(batches):
        for name, fn in methods.items():
            for cache in (True, False) if i in slow else (True,):
                model.seconds = model.rows = 0
                t, n_tok = timed(lambda: fn(batch, cache))
                if cache:
                    forward[name] = forward.get(name, 0.0) + model.seconds
                    rows[name] = rows.get(name, 0) + model.rows
                keys = [(name, cache)] + ([(name, cache, "subset")] if i in slow and cache else [])
                for key in keys:
                    seconds[key] = seconds.get(key, 0.0) + t
                    tokens[key] = tokens.get(key, 0) + n_tok
                    sentences[key] = sentences.get(key, 0) + len(batch)
        print(f"batch {i + 1}/{len(batches)} done", file=sys.stderr, flush=True)
    rate = {k: sentences[k] / seconds[k] for k in seconds}
    print("| method | cache | sentences | seconds | sentences/s | output tokens/s |")
    print("|---|---|---|---|---|---|")
    for key in [(m, c) for c in (True, False) for m in methods]:
        print(f"| {key[0]} | {'yes' if key[1] else 'no (recompute)'} | {sentences[key]} | "
              f"{seconds[key]:.1f} | {rate[key]:.2f} | {tokens[key] / seconds[key]:.0f} |")
    for m in methods:
        print(f"{m}: with the cache {rate[m, True, 'subset'] / rate[m, False]:.1f}x faster than "
              f"recomputing (same {sentences[m, False]} sentences)")
    print(f"with the cache, beam 4 is {rate['greedy', True] / rate['beam 4', True]:.2f}x slower "
          f"than greedy")
    for m in methods:
        own = seconds[m, True] - forward[m]
        print(f"{m}, with the cache: the model's forward passes {forward[m]:.1f} s ({rows[m]} "
              f"decoder rows), the search's own work {own:.1f} s ({own / seconds[m, True]:.0%})")
    print(f"the forward passes alone: beam 4 {forward['beam 4'] / forward['greedy']:.2f}x greedy's "
          f"on {rows['beam 4'] / rows['greedy']:.2f}x its rows; were beam search's own work free, "
          f"it would be {forward['beam 4'] / seconds['greedy', True]:.2f}x slower than greedy (the "
          f"floor for these rows)")

if __name__ == "__main__":
    main()
