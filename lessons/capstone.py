"""The capstone: your own code trains the translator.

    python lessons/capstone.py                           # your exercises: the demo, then Multi30k
                                                         # --quick (32 minutes)
    python lessons/capstone.py --solutions               # the answers in lessons/solutions/ instead
    python lessons/capstone.py --demo-only               # the demo task alone (a few minutes on 2
                                                         # cores)
    python lessons/capstone.py --data-dir data/multi30k  # where Multi30k's .gz files are
    python lessons/capstone.py --fast-bpe                # Multi30k's tokenizer by the package's
                                                         # learner
    python lessons/capstone.py --quick                   # the demo at demo_task.QUICK: seconds, no
                                                         # bar

It runs the demo subcommand's recipe (demo_task.DEMO: numbers in digits -> English words) and then
examples/multi30k.py --quick --steps 1200 --ranks 1 (German -> English; STEPS) with the functions
you wrote in lessons/exercises/ in place of the package's: PIECES says which exercise function
replaces which package function, and how it is wrapped. Before it is used, each of your functions
goes through the grader's check (lessons/checks/): one that fails (or does not load, or
runs out of time) is REFUSED and nothing runs, unless you name it with --package (then the package's
runs in its place, said in every result); one that still raises NotImplementedError is left to the
package's, said in the table and in every result. While the runs go, each call of yours is timed
like the grader's (CPU time) and one that raises or runs out of time stops the capstone, naming the
function, its call and the phase: no number is reported with code that was not yours in it
unannounced. Each result says where it came from: which lines, translated by whose search (beam
search, and how many lines each). The bar: the demo's held-out exact match at least 95%, Multi30k
--quick at least 35 BLEU. The demo translates its held-out lines, with the weights of its best
validation evaluation as the demo subcommand does, by beam search (4 beams, alpha 0:
this task has one right length, and a length penalty would only reward longer outputs) so that your
beam search runs; Note: the demo subcommand translates greedily. On Multi30k, your beam search
translates every 20th test line (EVERY: 50 of 1,000, of every length) and the package's batched
search the rest: a plain beam search, a sentence at a time without a cache, takes seconds a line
there (the solution: 4.8 s), so all 1,000 would take over an hour. Where yours ran, the BLEU counts
your output, and the capstone says on how many lines it equals the package's.

How your code gets in: the profiler's technique (minitransformer/profiler.py, _rebind). While the
capstone runs, every name in a package module that holds a replaced function is bound to an adapter
around yours (and Adam's _update on its class); on exit, also when an exception escapes, each is
bound back. Nothing of the package is edited. Left out on purpose: the GPU (your code is NumPy),
data parallel runs, attention dropout (where it is on, the package's attention runs), nbest lists.
"""
import argparse
import contextlib
import importlib.util
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

import check as grader  # lessons/check.py: it puts the repository and lessons/ on sys.path
from checks.common import Fail, Grade, NotDone
from minitransformer import attention, backend, optim, profiler, search
from minitransformer.text import bpe_learn
from minitransformer import functional as F
from minitransformer.config import SearchConfig
from minitransformer.text.demo_task import DEMO, QUICK, make_splits
from minitransformer.run.metrics import corpus_bleu, exact_match
from minitransformer.run.pipeline import prepare_training
from minitransformer.tensor import Tensor, make_node
from minitransformer.run.training import TrainingConfig
from minitransformer.run.translation import translate_lines, use_best_weights
from minitransformer.transformer import TransformerConfig

LESSONS = Path(__file__).resolve().parent
BAR_DEMO, BAR_BLEU = 0.95, 35.0
# Multi30k: --quick's updates when the bar was set (--quick now trains 1,800: 38.9 BLEU)
STEPS = 1200

# (lesson, your function, the package's function it replaces (owner, name), how yours is wrapped)
PIECES = [
    ("04", "softmax", (F, "softmax_array"), "arrays: attention's softmax, F.softmax's"),
    ("04", "softmax_backward", (F, "softmax"), "a graph node's backward"),
    ("04", "cross_entropy_backward", (F, "cross_entropy"),
     "a graph node's backward (the loss: the package's)"),
    ("11", "layer_norm", (F, "layer_norm"), "a graph node's forward"),
    ("04", "layer_norm_backward", (F, "layer_norm"), "that node's backward"),
    ("06", "attention_forward", (attention, "attention_forward"),
     "arrays: the attention node's forward"),
    ("06", "attention_backward", (attention, "attention_backward"),
     "arrays: the attention node's backward"),
    ("09", "noam_lr", (optim, "noam_schedule"), "times the schedule's scale"),
    ("09", "adam", (optim.Adam, "_update"), "on the flat parameters, in place"),
    ("08", "learn_merges", (bpe_learn, "learn_merges"), "BPE.train's learner"),
    ("08", "encode", (bpe_learn, "apply_merges"), "BPE.encode, word by word"),
    ("10", "length_penalty", (search, "length_penalty"), "as it is"),
    ("10", "beam_search", (search, "beam_search"), "a sentence at a time, the model as step"),
]
CALLS = Counter()                           # your function -> how many times the capstone called it
PHASE = ["choosing the pieces"]             # what the capstone is doing, for a refusal's line
ACTIVE = []                                 # the function of yours running now (timed), if any


class Refused(Exception):
    """One of your functions failed while the capstone ran: the run stops, and says why."""
# Multi30k: the lines your beam search translated, how many as the package's did, seconds
BEAM = Counter()
EVERY = 20       # Multi30k: your beam search translates every 20th test line (a sentence at a time)


def choose(folder, allow=()):
    """(mine, refused): {your function: it, guarded} for each piece that passes the grader's check,
    and {name: why} for each that fails it (or does not load) and is not in `allow` (--package);
    prints one line per piece: yours, the package's and why, or REFUSED and why."""
    mine, refused, loaded = {}, {}, {}
    width = max(len(name) for _, name, _, _ in PIECES)
    print(f"your pieces, from {folder}:")
    for lesson, name, (owner, attr), how in PIECES:
        stem, items = grader.LESSON_ITEMS[lesson]
        path = folder / f"{stem}.py"
        if path not in loaded:
            try:
                loaded[path] = grader.load(path)
            except (Exception, SystemExit) as e:
                loaded[path] = f"{path.name} does not load ({type(e).__name__}: {e})"
        module = loaded[path]
        verdict = module if isinstance(module, str) else quick_check(path, getattr(module, name,
                                                                                   None), name,
                                                                     dict(items).get(name))
        replaces = f"{getattr(owner, '__name__', '').split('.')[-1]}.{attr}"
        if verdict is None:
            mine[name] = guarded(name, getattr(module, name), path)
            whose = f"yours: {how}"
        elif verdict == "not implemented yet" or name in allow:
            whose = f"the package's: {verdict}" + (" (--package)" if name in allow else "")
        else:
            refused[name] = verdict
            whose = f"REFUSED: {verdict}"
        print(f"  {lesson} {name:<{width}}  -> {replaces:<30} {whose}")
    return mine, refused


def quick_check(path, fn, name, check):
    """None when `fn` passes the grader's check of `name`, else why it does not (one line)."""
    if fn is None:
        return f"{path.name} defines no {name}"
    if check is None:
        return f"the grader has no check of {name}"
    g = Grade(path)
    try:
        backend.seed(0)
        with grader.time_limit(g):
            check(fn, g)
        g.finish()
    except NotDone:
        return "not implemented yet"
    except Fail as e:
        return f"refused by the grader: {' '.join(str(e).split())}"
    except (Exception, SystemExit) as e:
        return f"refused by the grader: {g.case}: {type(e).__name__}: {e}"
    finally:
        backend.use("cpu")
    return None


def guarded(name, fn, path):
    """fn, counting its calls in CALLS[name], each timed as the grader times it (CPU time); one that
    raises or runs out of time raises Refused, naming the call and PHASE."""
    def call(*args, **kwargs):
        CALLS[name] += 1
        if ACTIVE:                                            # inside another of yours: timed there
            return fn(*args, **kwargs)
        g = Grade(path)
        ACTIVE.append(name)
        try:
            with grader.time_limit(g, per_thread=False), g.timed():     # (one thread trains here)
                return fn(*args, **kwargs)
        except Fail as e:                                       # out of time
            raise Refused(f"your {name}, call {CALLS[name]:,}, while {PHASE[0]}: {e}") from None
        except (Exception, SystemExit) as e:
            raise Refused(f"your {name}, call {CALLS[name]:,}, while {PHASE[0]}: raised "
                          f"{type(e).__name__}: {e}{g.where(e)}") from None
        finally:
            ACTIVE.pop()
    return call


# ---------------------------------------------------------- the adapters, one per replaced function
def cast(grads, parents):
    """Your gradients in each parent's dtype (float64 from a Python float must not
    reach float32 weights)."""
    return tuple(np.asarray(d, dtype=p.dtype) for d, p in zip(grads, parents))


def adapters(mine, package, beam_every=1):
    """{(owner, name): adapter} for every package function that at least one of `mine` replaces;
    `package` holds the originals, by (owner, name); beam_every: see beam_search_with."""
    swaps = {}
    if "softmax" in mine:
        def softmax_array(x, axis=-1, out=None):
            y = mine["softmax"](x, axis)
            if out is None:
                return y
            out[...] = y                                                # in place, as asked
            return out
        swaps[F, "softmax_array"] = softmax_array
    if "softmax_backward" in mine:
        def softmax(x, axis=-1):
            y = F.softmax_array(x.data, axis)                          # yours, when plugged in
            return make_node(y, (x,), lambda g: cast([mine["softmax_backward"](y, g, axis)], [x]),
                             "softmax")
        swaps[F, "softmax"] = softmax
    if "cross_entropy_backward" in mine:
        def cross_entropy(logits, target, ignore_index=None, label_smoothing=0.0,
                          return_count=False):
            loss, n = package[F, "cross_entropy"](logits.detach(), target, ignore_index,
                                                  label_smoothing, True)
            t = backend.to_numpy(target.data if isinstance(target, Tensor) else np.asarray(target))
            grad = lambda g: cast(
                [g * mine["cross_entropy_backward"](logits.data, t, label_smoothing, ignore_index)],
                [logits])
            node = make_node(loss.data, (logits,), grad, "cross_entropy")
            return (node, n) if return_count else node
        swaps[F, "cross_entropy"] = cross_entropy
    if "layer_norm" in mine or "layer_norm_backward" in mine:
        forward, backward = mine.get("layer_norm"), mine.get("layer_norm_backward")

        def layer_norm(x, gamma, beta, eps=1e-6):
            if backward is None:                              # your forward, the package's backward
                node = package[F, "layer_norm"](x, gamma, beta, eps)
                node.data[...] = forward(x.data, gamma.data, beta.data, eps)
                return node
            y = (forward(x.data, gamma.data, beta.data, eps) if forward else
                 package[F, "layer_norm"](x.detach(), gamma.detach(), beta.detach(), eps).data)
            grad = lambda g: cast(backward(x.data, gamma.data, g, eps), (x, gamma, beta))
            return make_node(np.asarray(y, dtype=x.dtype), (x, gamma, beta), grad, "layer_norm")
        swaps[F, "layer_norm"] = layer_norm
    if "attention_forward" in mine:
        def attention_forward(q, k, v, mask, dropout_p, training):
            if training and dropout_p > 0:                     # yours has no dropout on the weights
                return package[attention, "attention_forward"](q, k, v, mask, dropout_p, training)
            o, p = mine["attention_forward"](q, k, v, mask)
            return o.astype(q.dtype, copy=False), p.astype(q.dtype, copy=False), None
        swaps[attention, "attention_forward"] = attention_forward
    if "attention_backward" in mine:
        def attention_backward(g, q, k, v, p, kept, dropout_p, *needed):
            if kept is not None:                             # dropout on the weights: the package's
                package_backward = package[attention, "attention_backward"]
                return package_backward(g, q, k, v, p, kept, dropout_p, *needed)
            grads = cast(mine["attention_backward"](q, k, v, p, g), (q, k, v))
            return tuple(d if need else None for d, need in zip(grads, needed))
        swaps[attention, "attention_backward"] = attention_backward
    if "noam_lr" in mine:
        swaps[optim, "noam_schedule"] = lambda step, d_model, warmup_steps=4000, scale=1.0: \
            scale * mine["noam_lr"](step, d_model, warmup_steps)
    if "adam" in mine:
        def _update(self, p, g, m, v, buf, t):
            if self.weight_decay:                                      # yours has no weight decay
                return package[optim.Adam, "_update"](self, p, g, m, v, buf, t)
            p[...], m[...], v[...] = mine["adam"](p, g, m, v, t, self.lr, self.betas, self.eps)
        swaps[optim.Adam, "_update"] = _update
    if "learn_merges" in mine:
        swaps[bpe_learn, "learn_merges"] = (
            lambda word_counts, num_merges, min_frequency, offset, progress=False: [
                (int(a), int(b))
                for a, b in mine["learn_merges"](dict(word_counts), num_merges, min_frequency,
                                                 offset)])
    if "encode" in mine:
        swaps[bpe_learn, "apply_merges"] = apply_merges_with(mine["encode"])
    if "length_penalty" in mine:
        swaps[search, "length_penalty"] = mine["length_penalty"]
    if "beam_search" in mine:
        swaps[search, "beam_search"] = beam_search_with(mine["beam_search"],
                                                        package[search, "beam_search"],
                                                        beam_every)
    return swaps


def apply_merges_with(encode):
    """bpe_learn.apply_merges(ids, ranks) by your encode(word, merges, offset): the word's bytes
    back from its ids, the merges in rank order (kept while the same ranks come again)."""
    last = [None, None]                                           # ranks, and their merges in order

    def apply_merges(ids, ranks):
        if not ranks:
            return list(ids)
        if ranks is not last[0]:
            last[:] = ranks, sorted(ranks, key=ranks.get)
        offset = ranks[last[1][0]] - 256                             # merge 0 makes id offset + 256
        return [int(i)
                for i in encode(bytes(i - offset for i in ids).decode("utf-8"), last[1], offset)]
    return apply_merges


def beam_search_with(yours, package_beam_search, every=1):
    """search.beam_search(model, sources, config) by your beam_search(step, k, max_len, alpha), one
    sentence at a time: step(prefixes) decodes all prefixes (of one length) in one batch, without
    the cache. every > 1: yours translates every `every`-th sentence (counted over all calls) and
    the package's batched search all of them; where yours ran, its output is kept and
    compared (BEAM counts)."""
    def yours_one(model, ids, config):
        c = model.config
        x = backend.asarray(np.array([list(ids) + [c.eos_id]]))           # (1, S) x </s>
        memory = model.encode(x, attention.padding_mask(x, c.pad_id))      # (1, S, D)

        def step(prefixes):
            tgt = backend.asarray(np.array([[c.bos_id, *y] for y in prefixes]))        # (n, t+1)
            z = model.decode(tgt, Tensor(memory.data[[0] * len(prefixes)])).data[:, -1]  # (n, V)
            logp = backend.to_numpy(F.log_softmax_array(z))
            logp[:, [c.pad_id, c.bos_id]] = -np.inf                          # never emitted
            return logp
        max_len = min(int(config.max_len_a * len(ids) + config.max_len_b), c.max_len - 1)
        tokens, log_prob = yours(step, config.beam_size, max_len, config.alpha)
        score = log_prob / search.length_penalty(len(tokens) + 1, config.alpha)
        return search.Hypothesis([int(t) for t in tokens], float(score), float(log_prob))

    def beam_search(model, src, config=SearchConfig(), *, use_cache=True, return_attention=False):
        if config.nbest != 1 or return_attention:
            return package_beam_search(model, src, config, use_cache=use_cache,
                                       return_attention=return_attention)
        results = package_beam_search(model, src, config) if every > 1 else [None] * len(src)
        with model.inference_mode():
            for i, ids in enumerate(src):
                BEAM["seen"] += 1
                if (BEAM["seen"] - 1) % every:
                    continue
                start = time.perf_counter()
                mine = yours_one(model, ids, config)
                BEAM["lines"], BEAM["seconds"] = (BEAM["lines"] + 1,
                                                  BEAM["seconds"] + time.perf_counter() - start)
                if results[i] is not None:
                    BEAM["same"] += mine.tokens == results[i][0].tokens
                results[i] = [mine]
        return results
    return beam_search


@contextlib.contextmanager
def plugged(mine, beam_every=1):
    """Your functions in place of the package's while the block runs (profiler._rebind binds every
    name of a package module that holds the function; a class attribute is set), restored on exit.
    beam_every: your beam search translates every beam_every-th sentence (beam_search_with)."""
    package = {target: getattr(*target) for _, _, target, _ in PIECES}
    swaps = [(target, package[target], adapter)
             for target, adapter in adapters(mine, package, beam_every).items()]
    try:
        for (owner, name), original, adapter in swaps:
            profiler._rebind({id(original): adapter})
            setattr(owner, name, adapter)
        yield
    finally:
        for (owner, name), original, adapter in swaps:
            profiler._rebind({id(adapter): original})
            setattr(owner, name, original)


# -------------------------------------------------------------------- the two runs
def run_demo(settings, progress=False, seed=0):
    """The demo subcommand's recipe (cli/demo.py) with `settings` (demo_task.DEMO or QUICK); the
    held-out lines translated by beam search. Returns the exact match, a fraction."""
    train, valid, test = make_splits(settings["n_train"], settings["n_test"], settings["n_test"],
                                     seed=seed, max_numbers=settings["max_numbers"],
                                     max_digits=settings["max_digits"])
    training_config = TrainingConfig(steps=settings["steps"], max_tokens=settings["max_tokens"],
                                     warmup_steps=settings["warmup_steps"],
                                     lr_scale=settings["lr_scale"],
                                     eval_every=settings["eval_every"], save_every=0, keep=1,
                                     seed=seed,
                                     eval_sentences=100, progress=progress)
    config = lambda vocab_size: TransformerConfig.tiny(vocab_size=vocab_size,
                                                       dropout=settings["dropout"],
                                                       **settings["overrides"])
    with tempfile.TemporaryDirectory(prefix="capstone-demo-") as out:
        trainer, tokenizer = prepare_training(*train, config, training_config, out,
                                              vocab_size=settings["vocab_size"], valid=valid)
        summary = trainer.train()
        if summary["stopped"] != "done":
            raise KeyboardInterrupt
        use_best_weights(trainer.model, out)              # as the demo subcommand does
        hypotheses = translate_lines(trainer.model, tokenizer, test[0],
                                     SearchConfig(beam_size=4, alpha=0.0))
    for source, reference, hypothesis in list(zip(test[0], test[1], hypotheses))[:3]:
        print(f"  {source}  ->  {hypothesis}  [{'ok' if hypothesis == reference else 'WRONG'}]")
    print(f"  training loss {summary['last_loss']:.3f} after {summary['steps_run']} steps "
          f"({summary['seconds']:.0f} s)")
    return exact_match(hypotheses, test[1])


def multi30k_example():
    """examples/multi30k.py, imported (it is a script, not a module of the package)."""
    spec = importlib.util.spec_from_file_location("multi30k",
                                                  LESSONS.parent / "examples" / "multi30k.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def run_multi30k(example, data_dir, progress=False):
    """examples/multi30k.py --quick --steps STEPS --ranks 1, in this process: its test BLEU, or None
    when it did not finish. One rank, as when the bar was set (--quick's default of 2 ranks
    cuts other batches)."""
    with tempfile.TemporaryDirectory(prefix="capstone-multi30k-") as out:
        argv = ["--quick", "--steps", str(STEPS), "--ranks", "1", "--data-dir", str(data_dir),
                "--out", out]
        argv += [] if progress else ["--no-progress"]
        if example.main(argv) != 0:
            return None
        files = example.find_files(data_dir)
        references = example.read_parallel(files["test_2016_flickr.de"],
                                           files["test_2016_flickr.en"])[1]
        hypotheses = (Path(out)
                      / "test_2016_flickr.hyp.en").read_text(encoding="utf-8").splitlines()
    return corpus_bleu(hypotheses, [references])[0]


def verdict(what, value, bar, shown):
    """Print whether `value` meets the bar; True when it does."""
    ok = value is not None and value >= bar
    print(f"{what}: {shown}: {'meets' if ok else 'below'} the bar")
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python lessons/capstone.py",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n" + __doc__.split("\n\n")[1])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--solutions", action="store_true",
                       help="plug in lessons/solutions/ instead of your exercises")
    which.add_argument("--exercises", type=Path, metavar="DIR",
                       help="plug in the NN_*.py files of DIR (default: lessons/exercises/)")
    parser.add_argument("--demo-only", action="store_true", help="skip Multi30k")
    parser.add_argument("--quick", action="store_true",
                        help="the demo at demo_task.QUICK (seconds: checks the plumbing, not the "
                             "bar), no Multi30k")
    parser.add_argument("--data-dir", type=Path,
                        help="Multi30k's .gz files (default: examples/multi30k.py's)")
    parser.add_argument("--fast-bpe", action="store_true",
                        help="learn Multi30k's tokenizer with the package's learner (seconds) "
                             "instead of yours (the plain learner of lesson 08: 17 minutes there, "
                             "with its encode)")
    parser.add_argument("--package", metavar="NAMES", default="",
                        help="comma-separated functions of yours that the grader refuses and that "
                             "the package's should replace, said in every result (e.g. "
                             "softmax,adam)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    allow = [name for name in args.package.split(",") if name]
    unknown = sorted(set(allow) - {name for _, name, _, _ in PIECES})
    if unknown:
        parser.error(f"--package: no piece named {', '.join(unknown)}; the pieces: "
                     f"{', '.join(name for _, name, _, _ in PIECES)}")
    folder = LESSONS / "solutions" if args.solutions else args.exercises or LESSONS / "exercises"
    if not folder.is_dir():
        parser.error(f"--exercises: no directory {folder}")
    for option, given in (("--data-dir", args.data_dir is not None), ("--fast-bpe", args.fast_bpe)):
        if given and (args.quick or args.demo_only):
            parser.error(f"{option} is for Multi30k, which --quick and --demo-only skip: leave one "
                         f"out")
    if args.data_dir is not None and args.data_dir.exists() and not args.data_dir.is_dir():
        parser.error(f"--data-dir {args.data_dir} is a file, not a directory")
    backend.use("cpu")
    print(f"The bar: the demo's exact match at least {BAR_DEMO:.0%}, Multi30k --quick at least "
          f"{BAR_BLEU:g} BLEU.")
    mine, refused = choose(folder.resolve(), allow)
    if refused:
        print(f"\nREFUSED: {len(refused)} of your functions fail the grader, so nothing is trained "
              f"with them:")
        for name, why in refused.items():
            print(f"  {name}: {why}")
        print(f"Fix them (python lessons/check.py NN NAME says what differs), or let the package's "
              f"run in their place, said in every result: --package {','.join(refused)}")
        return 1
    print(f"{len(mine)} of {len(PIECES)} pieces are yours"
          + ("" if mine else ": the package alone trains"))
    try:
        return run_all(args, mine)
    except Refused as e:
        print(f"\nREFUSED: {e}\nThe capstone stops here: no number is reported. Grade it: "
              f"python lessons/check.py with that function's lesson.")
        return 1


def whose(mine):
    """Which pieces ran as yours, as one phrase."""
    theirs = missing(mine)
    return ("every piece yours" if not theirs else "none of the pieces yours" if not mine else
            f"your pieces, but the package's {', '.join(theirs)}")


def run_all(args, mine):
    """The demo, then Multi30k; each result says where it came from. The exit status."""
    ok = True
    with plugged(mine):
        settings = QUICK if args.quick else DEMO
        print(f"\n1. the demo task ({'demo_task.QUICK' if args.quick else 'demo_task.DEMO'}: "
              f"{settings['steps']} steps)")
        PHASE[0] = "training and translating the demo"
        match = run_demo(settings, progress=not args.no_progress)
        ok = verdict("demo exact match", match, BAR_DEMO, f"{match:.1%}") or args.quick
        search_by = "your beam_search" if "beam_search" in mine else "the package's beam_search"
        print(f"   from: the {settings['n_test']:,} held-out lines, each translated by beam search "
              f"(4 beams, alpha 0) with {search_by}; trained with {whose(mine)}")
    if not (args.quick or args.demo_only):
        ok = run_multi30k_part(args, mine) and ok
    print("\nyour code ran: "
          + (", ".join(f"{name} {CALLS[name]:,}x" for name in mine) or "none of it"))
    if any(CALLS[name] == 0 for name in mine):
        print("(0x: this run needed it nowhere; your attention_forward, for one, does the "
              "softmax's work)")
    return 0 if ok else 1


def missing(mine):
    return [name for _, name, _, _ in PIECES if name not in mine]


def run_multi30k_part(args, mine):
    """Multi30k --quick with your pieces: True when it meets the bar (or was skipped)."""
    example = multi30k_example()
    data_dir = args.data_dir or (example.SHARED if example.SHARED.is_dir()
                                 else Path("data/multi30k"))
    try:
        example.find_files(data_dir)
    except example.UsageError as e:
        print(f"\n2. Multi30k --quick: skipped: {e}")
        return True
    print(f"\n2. Multi30k --quick --steps {STEPS}, from {data_dir}")
    if "learn_merges" in mine:
        print("   its 8,000-id tokenizer: "
              + ("the package's learner (--fast-bpe); your encode tokenizes" if
              args.fast_bpe
                 else "your learner: 17 minutes with its encode if it is the plain one of lesson "
                      "08 (0.1 s a merge on Multi30k, 7,741 merges; --fast-bpe: the package's, "
                      "seconds)"))
    if "beam_search" in mine:
        print(f"   the test set: your beam search translates every {EVERY}th line, a sentence at a "
              f"time; the package's batched search all of them, to compare and for the rest")
    BEAM.clear()
    used = {k: f for k, f in mine.items() if k != "learn_merges" or not args.fast_bpe}
    PHASE[0] = "training and translating Multi30k"
    with plugged(used, EVERY):
        bleu = run_multi30k(example, data_dir, progress=not args.no_progress)
    if BEAM["lines"]:
        print(f"your beam search translated {BEAM['lines']} of the {BEAM['seen']:,} test lines "
              f"({BEAM['seconds'] / BEAM['lines']:.1f} s a line): the package's output on "
              f"{BEAM['same']} of them")
    shown = "did not finish" if bleu is None else f"{bleu:.2f}"
    ok = verdict("Multi30k test BLEU", bleu, BAR_BLEU, shown)
    lines = (f"{BEAM['lines']} of them (every {EVERY}th) by your beam search, the other "
             f"{BEAM['seen'] - BEAM['lines']:,} by the package's batched beam search"
             if BEAM["lines"] else
             "all by the package's batched beam search")
    print(f"   from: the lines of test_2016_flickr, translated by beam search "
          f"(examples/multi30k.py's beam and alpha): {lines}; trained with {whose(used)}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
