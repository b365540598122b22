"""German -> English on Multi30k (Elliott et al., 2016): learn a joint BPE, train, average the last
checkpoints (section 6.1), translate test_2016_flickr with beam search, print sacreBLEU.

    python examples/multi30k.py                      # the recipe: 2 ranks (threads), 30-41 minutes
                                                     # on 2 cores, BLEU 40.9-41.4 (seeds 0-2)
    python examples/multi30k.py --ranks 1            # one process, both cores: 37 minutes, BLEU
                                                     # 40.5 (other batches)
    python examples/multi30k.py --steps 6000 --dropout 0.3 --ranks 1
                                                     # the previous recipe: 67-106 min, 41.3-41.9
    python examples/multi30k.py --quick              # the tiny preset, 2 ranks: about 7 minutes,
                                                     # BLEU 38.0-39.3 over seeds 0-2
    python examples/multi30k.py --layer-norm post --lr-scale 0.3 --warmup 300
                                                     # the paper's post-LN
    python examples/multi30k.py --device gpu         # the GPU recipe: one H200, 2 minutes, BLEU
                                                     # 41.6
    python examples/multi30k.py --out runs/m30k --resume       # continue the latest checkpoint
    mpiexec -n 2 -genv OMP_NUM_THREADS 1 python examples/multi30k.py --max-tokens 1024
                                                     # the same ranks as processes

The defaults (small preset with pre-LN, dropout 0.2, label smoothing 0.2, 3,200 updates of 2,048
tokens at 1.0 x eq. (3), warmup 400, seed 0, about 14 epochs, the last 5 checkpoints averaged, beam
4, alpha 1.0; chosen on the validation set) run as 2 ranks of 1,024 tokens, threads of this process,
a core each (--ranks; under mpiexec, processes, with the same bits): test_2016_flickr sacreBLEU
41.34 (lowercased 41.55, chrF 59.95) in 35.2 minutes from start to score on 2 CPU cores
(results/multi30k-default-2026-11-28/); seeds 1 and 2 41.28 and 40.94
(results/multi30k-seeds-2026-11-28-799acd1/). The previous recipe, 6,000 updates at dropout 0.3
in one process (about 25 epochs): test_2016_flickr sacreBLEU 41.33
(nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0), lowercased 41.56, chrF 60.37, in 106.3
minutes from start to score on 2 CPU threads with nothing else running (1.02-1.10 s per update); on
another 2-core machine 66.6 minutes (0.66-0.71 s per update) and 41.51 (lowercased
41.74, chrF 60.49). The recipe's first run, trained in two pieces, scored 41.93 (lowercased 42.17):
the differences are run-to-run noise. Why pre-LN (Note: the paper is post-LN), the dropout, label
smoothing 0.2 (Note: the paper's is 0.1) and every run: docs/experiments.md; logs and curves:
results/multi30k-cpu-onepiece/, results/multi30k-cpu-6000-amd-epyc-2026-11-25/ and
results/multi30k-cpu/.

The GPU recipe, the default with --device gpu: the previous recipe's model and settings
(dropout 0.3) on 4x larger batches, 8,192 tokens, for 3,000 updates (about 44 epochs); --minutes 10
would stop it after 10 minutes of training at the latest (with a checkpoint, then average and score;
--resume continues it); benchmarks/gpu_check.py runs it (docs/gpu_check.md). On one H200: 222 s of
training, test_2016_flickr sacreBLEU 41.57 (results/gpu-run-h200/).

Expects train / val / test_2016_flickr .de.gz and .en.gz (29,000 / 1,014 / 1,000 lines) in
--data-dir; --download fetches them from the dataset's public repository (needs internet).
"""
import argparse
import gzip
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minitransformer.run import checkpoint as ckpt  # noqa: E402
from minitransformer import backend  # noqa: E402
from minitransformer.run import distributed, host  # noqa: E402
from minitransformer.text.bpe import BPE, MAX_VOCAB, MIN_VOCAB  # noqa: E402
from minitransformer.checks import SettingError  # noqa: E402
from minitransformer.text.fileio import check_writable_dir  # noqa: E402
from minitransformer.run.rundir import check_new_run, check_run_path, list_checkpoints  # noqa: E402
from minitransformer.text.corpus import read_parallel  # noqa: E402
from minitransformer.run.metrics import corpus_bleu, corpus_chrf  # noqa: E402
from minitransformer.run.pipeline import prepare_training  # noqa: E402
from minitransformer.config import SearchConfig  # noqa: E402
from minitransformer.run.translation import translate_lines  # noqa: E402
from minitransformer.run.training import TrainingConfig, TrainingError  # noqa: E402
from minitransformer.transformer import TransformerConfig  # noqa: E402

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{}"
# The defaults that differ between the recipe and --quick (each chosen on val: docs/experiments.md).
# config: a 4x smaller model learns more per minute of a short run; dropout
# 0.3 wins over 15 epochs, a short run learns faster with 0.1; label
# smoothing 0.2 wins at 15 and 25 epochs, --quick was measured with 0.1.
RECIPE = {"config": "small", "steps": 3200, "dropout": 0.2, "label_smoothing": 0.2,
          "max_tokens": 2048,
          "eval_every": 1200}
QUICK = {**RECIPE, "config": "tiny", "steps": 1800, "dropout": 0.1, "label_smoothing": 0.1}
# --device gpu: 4x larger batches for about as many updates (a GPU runs a large batch in about the
# time of a small one), dropout 0.3 at 44 epochs; one H200: 2 minutes to test BLEU 41.60 (commit
# 2ab2c44; results/gpu-run-h200/)
GPU = {**RECIPE, "steps": 3000, "dropout": 0.3, "max_tokens": 8192, "eval_every": 1000}
# the defaults, 2 ranks: test 38.97 at e94add3, 38.67 at 5b7f3a0 (results/)
QUICK_BLEU = "38.7-39.0"
SPLITS = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}  # lines per file
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
# TrainingConfig's, TransformerConfig's and SearchConfig's fields -> the options that set them
OPTIONS = {"max_tokens": "--max-tokens", "accum": "--accum", "steps": "--steps",
           "warmup_steps": "--warmup",
           "lr_scale": "--lr-scale", "eval_every": "--eval-every", "save_every": "--save-every",
           "keep": "--average",
           "seed": "--seed", "dropout": "--dropout", "label_smoothing": "--label-smoothing",
           "beam_size": "--beam",
           "alpha": "--alpha"}


class UsageError(Exception):
    """A bad option or data directory: argparse's error line and exit code 2."""


def count_lines(path):
    """Lines of a gzip-compressed UTF-8 text file; a ValueError if it is not one."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return sum(1 for _ in f)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not gzip-compressed UTF-8 text ({e})") from None


def download(data_dir):
    """Fetch the six files into data_dir (skipping those already there and whole), with a progress
    bar; each is checked to be gzip text with the expected number of lines before it is kept."""
    from tqdm import tqdm
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, n in SPLITS.items():
        for lang in ("de", "en"):
            name = f"{split}.{lang}.gz"
            dest = data_dir / name
            if dest.exists() and count_lines(dest) == n:
                continue
            url, tmp = URL.format(name), dest.with_suffix(".gz.part")
            try:
                with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
                    total = int(r.headers.get("Content-Length") or 0) or None
                    with tqdm(total=total, unit="B", unit_scale=True, desc=name) as bar:
                        while chunk := r.read(1 << 16):
                            f.write(chunk)
                            bar.update(len(chunk))
            except (urllib.error.URLError, OSError) as e:
                tmp.unlink(missing_ok=True)
                reason = getattr(e, "reason", e)
                raise SystemExit(f"cannot download {url}: {reason}. Without internet, copy the "
                                 f"Multi30k files "
                                 f"({', '.join(f'{s}.de.gz/.en.gz' for s in SPLITS)}) into "
                                 f"{data_dir}.")
            got = count_lines(tmp)
            if got != n:
                tmp.unlink()
                raise SystemExit(f"{url} gave {got} lines, expected {n}: not the Multi30k file")
            os.replace(tmp, dest)


def find_files(data_dir):
    if data_dir.exists() and not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir} is a file, not a directory")
    files = {f"{s}.{l}": data_dir / f"{s}.{l}.gz" for s in SPLITS for l in ("de", "en")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise UsageError(f"Multi30k files missing: {', '.join(missing)}; run with --download "
                         f"(needs internet) or point --data-dir at a directory that holds them")
    return files


def model_config(args, vocab_size):
    return getattr(TransformerConfig, args.config)(vocab_size=vocab_size,
                                                   norm_first=args.layer_norm == "pre",
                                                   dropout=args.dropout,
                                                   label_smoothing=args.label_smoothing)


def check_args(args):
    """Every option, before any work (only a tokenizer.json in --out is read, nothing is written):
    the (TrainingConfig, SearchConfig of the final translation), or a UsageError naming the option
    of the first bad one. (A checkpoint to resume is
    checked by prepare_training: the same model, not past --steps.)"""
    if args.minutes is not None and not args.minutes > 0:
        raise UsageError(f"--minutes must be a number above 0, got {args.minutes}")
    if args.ranks is not None and args.ranks > distributed.max_rank_threads():
        raise UsageError(f"--ranks must be at most {distributed.max_rank_threads()} (2 rank "
                         f"threads per CPU core here: more would only wait for a core, each "
                         f"holding its own activations), got {args.ranks:,}")
    if args.cuda_graphs and args.device != "gpu":
        raise UsageError("--cuda-graphs replays CUDA graphs: give --device gpu")
    if args.minutes is not None and distributed.world().size > 1:
        # ranks would stop at different updates
        raise UsageError("--minutes works in one process only, not under mpiexec: give --steps "
                         "instead")
    if not MIN_VOCAB <= args.vocab_size <= MAX_VOCAB:
        raise UsageError(f"--vocab-size must be between {MIN_VOCAB} (<pad> <s> </s> and the 256 "
                         f"bytes) and {MAX_VOCAB:,}, got {args.vocab_size:,}")
    try:
        training_config = TrainingConfig(steps=args.steps, max_tokens=args.max_tokens,
                                         accum=args.accum, warmup_steps=args.warmup,
                                         lr_scale=args.lr_scale, eval_every=args.eval_every,
                                         save_every=args.save_every, keep=args.average,
                                         seed=args.seed, eval_sentences=300,
                                         progress=not args.no_progress,
                                         cuda_graphs=args.cuda_graphs)
        model_config(args, args.vocab_size)
        search = SearchConfig(beam_size=args.beam, alpha=args.alpha)
    except SettingError as e:
        raise UsageError(e.renamed(OPTIONS)) from None
    try:
        if args.download:
            check_writable_dir(args.data_dir, "--data-dir")
        else:
            find_files(args.data_dir)
        check_run_path(args.out, "--out")
        check_writable_dir(args.out, "--out")
        if not args.resume:
            check_new_run(args.out, "--out", "continue that run (--resume), or ")
        elif not list_checkpoints(str(args.out)):
            # nothing to continue: a fresh run, touching no earlier one's
            check_new_run(args.out, "--out",
                          "--resume finds none of its step checkpoints to continue; put them "
                          "back, ")
    except ValueError as e:  # the library's checks of a path name the option
        raise UsageError(str(e)) from None
    tokenizer_file = args.out / "tokenizer.json"
    if tokenizer_file.exists():
        # learned by an earlier run: used again, so it must be the one asked for
        try:
            ids = BPE.load(tokenizer_file).vocab_size
        except (ValueError, OSError) as e:
            raise UsageError(f"--out: {e}") from None
        if ids != args.vocab_size:
            raise UsageError(f"--out {args.out} holds the tokenizer.json of an earlier run, "
                             f"{ids:,} ids, but --vocab-size is {args.vocab_size:,}: give "
                             f"--vocab-size {ids} to use it, or move it away to learn a new one")
    return training_config, search


def fill_defaults(args):
    """Set what the command line left unset (None) from the recipe that fits: QUICK with --quick,
    else GPU with --device gpu, else RECIPE."""
    recipe = QUICK if args.quick else GPU if args.device == "gpu" else RECIPE
    for name, default in recipe.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def ranks_to_start(args):
    """How many ranks this process should start as its threads: 1 (train here) or
    more (see --ranks)."""
    if distributed.launched_size() > 1:  # started by mpiexec: this process is one of the ranks
        if args.ranks not in (None, 1):
            raise UsageError(f"--ranks {args.ranks} starts ranks itself (threads): run without "
                             f"mpiexec, or leave --ranks out")
        return 1
    if args.ranks is None:
        alone = args.minutes is not None or args.device == "gpu"
        return 1 if alone else distributed.default_ranks()
    if args.ranks < 1:
        raise UsageError(f"--ranks must be an integer of at least 1, got {args.ranks}")
    if args.ranks > 1 and args.device == "gpu":
        raise UsageError(f"--ranks {args.ranks} starts threads that share the CPU's cores: for "
                         f"several GPUs, start one process per GPU under mpiexec (lesson 12)")
    if args.ranks > 1 and args.minutes is not None:
        raise UsageError("--minutes works in one process only: give --ranks 1, or --steps instead")
    if args.max_tokens // args.ranks < 1:
        raise UsageError(f"--max-tokens {args.max_tokens} cannot be split among --ranks "
                         f"{args.ranks}")
    return args.ranks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path,
                   default=SHARED if SHARED.exists() else Path("data/multi30k"),
                   help=f"where the .gz files are (default: {SHARED} when it exists, else "
                        f"data/multi30k)")
    p.add_argument("--download", action="store_true", help="fetch the files first (needs internet)")
    p.add_argument("--out", type=Path, default=Path("runs/multi30k"), help="default: runs/multi30k")
    p.add_argument("--config", choices=("tiny", "small", "base", "big"),
                   help=f"model preset (default: {RECIPE['config']}; --quick: {QUICK['config']})")
    p.add_argument("--layer-norm", choices=("pre", "post"), default="pre",
                   help="LayerNorm before each sub-layer (pre, default; Note: not the paper's) or "
                        "after it (post, the paper's): post-LN stalls at the full rate of eq. (3) "
                        "with these small batches (docs/experiments.md)")
    p.add_argument("--quick", action="store_true",
                   help=f"a short run: the {QUICK['config']} preset (D 128, 2 + 2 layers), "
                        f"{QUICK['steps']} updates at dropout {QUICK['dropout']}, label smoothing "
                        f"{QUICK['label_smoothing']} (as 2 ranks, like the recipe: about 7 minutes "
                        f"on 2 CPU cores; expected test BLEU {QUICK_BLEU}, measured with these "
                        f"defaults)")
    p.add_argument("--vocab-size", type=int, default=8000,
                   help="joint BPE vocabulary (default: 8000)")
    p.add_argument("--steps", type=int,
                   help=f"updates (default: {RECIPE['steps']}; --quick: {QUICK['steps']}; --device "
                        f"gpu: {GPU['steps']})")
    p.add_argument("--max-tokens", type=int,
                   help=f"tokens per update and side, split among --ranks (default: "
                        f"{RECIPE['max_tokens']}; --device gpu: {GPU['max_tokens']}); under your "
                        f"own mpiexec, per rank")
    p.add_argument("--ranks", type=int,
                   help="ranks that train together (data parallel, lesson 12), each a thread of "
                        "this process on a core of its own (default: 2 on a CPU of 2 or more "
                        "cores, --quick too; else 1, and 1 with --minutes or --device gpu)")
    p.add_argument("--accum", type=int, default=1, help="batches per update (default: 1)")
    p.add_argument("--warmup", type=int, default=400,
                   help="warmup steps (default: 400; Note: the paper's 4000 is for 25k-token "
                        "batches and 100k steps)")
    p.add_argument("--lr-scale", type=float, default=1.0, help="factor on eq. (3) (default: 1)")
    p.add_argument("--dropout", type=float,
                   help=f"P_drop (default: {RECIPE['dropout']}, tuned on val: the paper uses 0.1 "
                        f"for its base model and 0.3 for its big one; --quick: {QUICK['dropout']}; "
                        f"--device gpu: {GPU['dropout']})")
    p.add_argument("--label-smoothing", type=float,
                   help=f"eps_ls (default: {RECIPE['label_smoothing']}, tuned on val; Note: the "
                        f"paper's is 0.1; --quick: {QUICK['label_smoothing']})")
    p.add_argument("--eval-every", type=int,
                   help=f"updates between validations (default: {RECIPE['eval_every']}; --device "
                        f"gpu: {GPU['eval_every']})")
    p.add_argument("--save-every", type=int, default=100,
                   help="updates between checkpoints (default: 100)")
    p.add_argument("--average", type=int, default=5,
                   help="average the last N checkpoints (default: 5)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=1.0,
                   help="length penalty (default: 1.0, tuned on val; the paper's 0.6 scored "
                        "0.2-0.3 lower: results/multi30k-cpu-6000-ls01/decoding.md)")
    p.add_argument("--score-on", choices=("test", "val"), default="test",
                   help="the split translated and scored at the end (default: test_2016_flickr; "
                        "val while tuning, so that test is scored only once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="with --device gpu: each batch shape's update recorded once as a CUDA "
                        "graph, then replayed (faster; --accum 1, one process; lesson 11)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in --out")
    p.add_argument("--minutes", type=float,
                   help="stop training this many minutes after the start (a checkpoint is saved), "
                        "then average, translate and score as after the last update (default: no "
                        "limit)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    fill_defaults(args)
    try:
        try:  # 10**400 would overflow later (a float, int64, a checkpoint's JSON): refused first
            host.check_exact(p.prog,
                             **{f"--{k.replace('_', '-')}": v for k, v in vars(args).items()})
        except SettingError as e:
            raise UsageError(e.message) from None
        ranks = ranks_to_start(args)
        training_config, search = check_args(args)
        backend.use(args.device)
    except UsageError as e:
        p.error(str(e))
    except RuntimeError as e:  # --device gpu without a usable GPU
        raise SystemExit(f"{p.prog}: error: --device {args.device}: {e}") from None
    if ranks > 1:
        # the ranks as threads of this process (the same
        # bits as mpiexec's): each update's batch split
        argv = list(sys.argv[1:] if argv is None else argv) + ["--ranks", "1", "--max-tokens",
                                                               str(args.max_tokens // ranks)]
        print(f"training as {ranks} ranks of {args.max_tokens // ranks:,} tokens, one thread each "
              f"(--ranks 1: one rank, its passes cut over the cores)", flush=True)
        return distributed.run_threads(main, (argv,), ranks)
    try:
        return run(args, training_config, search)
    except (UsageError, ckpt.CheckpointError, TrainingError, ValueError, OSError,
            RuntimeError) as e:
        # --accum past an epoch's batches
        option = isinstance(e, SettingError) and e.owner == "Trainer"
        # one line
        print(f"{p.prog}: error: {e.renamed(OPTIONS) if option else e}", file=sys.stderr)
        return 2 if option else 1
    except KeyboardInterrupt:
        print(f"{p.prog}: interrupted", file=sys.stderr)
        return 130


def run(args, training_config, search):
    """Download (with --download), train, average, translate and score; the exit code."""
    start = time.perf_counter()
    if args.download:  # data parallel: rank 0 fetches, the others wait for the files
        if distributed.world().is_main:
            download(args.data_dir)
        distributed.world().barrier()
    # --out is made by prepare_training, once the training files are read
    files = find_files(args.data_dir)

    # 1. a joint BPE over German and English training text (learned once, then reused from --out),
    # 2. the model and the Trainer, resumed from the latest checkpoint with --resume
    tokenizer_file = args.out / "tokenizer.json"
    trainer, tokenizer = prepare_training(
        *read_parallel(files["train.de"], files["train.en"]),
        lambda vocab_size: model_config(args, vocab_size), training_config, str(args.out),
        tokenizer=tokenizer_file if tokenizer_file.exists() else None, vocab_size=args.vocab_size,
        valid=read_parallel(files["val.de"], files["val.en"]), max_len=256,
        resume="auto" if args.resume else None)
    model = trainer.model
    if distributed.world().is_main:
        print(f"{args.config} preset, {args.layer_norm}-LN; {trainer.total_steps} updates")
    out_of_time = []

    def stop_in_time(trainer):
        # --minutes: a Ctrl-C of our own, after a whole update (a checkpoint is saved)
        if args.minutes is not None and time.perf_counter() - start > 60 * args.minutes:
            out_of_time.append(trainer.step)
            raise KeyboardInterrupt
    trainer.callbacks.append(stop_in_time)
    summary = trainer.train()
    if out_of_time:
        print(f"--minutes {args.minutes}: training stopped at update {out_of_time[0]} of "
              f"{trainer.total_steps}")
    elif summary["stopped"] != "done":
        return 143 if summary["stopped"] == "terminated" else 130
    if not distributed.world().is_main:
        # data parallel: rank 0 alone averages, translates and scores
        return 0
    print(f"trained {summary['steps_run']} steps in {summary['seconds']:.0f} s, "
          f"{summary['tgt_tokens']:,} target tokens, {summary['tokens_per_s']:.0f} target tokens/s "
          f"(evaluations included); now in epoch "
          f"{trainer.iterator.epoch + 1}"
          + ("" if summary["best_bleu"] is None
             else f"; best validation BLEU {summary['best_bleu']:.2f}"))

    # 3. average the last checkpoints, 4. translate the test set (or val, while tuning)
    last = list_checkpoints(str(args.out))[-args.average:]
    averaged = ckpt.average(last)
    model.load_state_dict(averaged.model)
    print(f"averaged {len(last)} checkpoint{'s' * (len(last) > 1)}: "
          + ", ".join(os.path.basename(p) for p in last)
          + (f" (fewer than --average {args.average}: only these are in {args.out})"
             if len(last) < args.average
             else ""))
    split = "test_2016_flickr" if args.score_on == "test" else "val"
    sources, references = read_parallel(files[f"{split}.de"], files[f"{split}.en"])
    t0 = time.perf_counter()
    hyps = translate_lines(model, tokenizer, sources, search, progress=not args.no_progress)
    bleu, signature = corpus_bleu(hyps, [references])
    (args.out / f"{split}.hyp.en").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    for source, reference, hypothesis in list(zip(sources, references, hyps))[:3]:
        print(f"  DE  {source}\n  REF {reference}\n  HYP {hypothesis}\n")
    bleu_lc, signature_lc = corpus_bleu(hyps, [references], lowercase=True)
    chrf, chrf_signature = corpus_chrf(hyps, [references])
    print(f"{split}: BLEU = {bleu:.2f}  ({signature}); beam {args.beam}, alpha {args.alpha}; "
          f"decoding {time.perf_counter() - t0:.0f} s; total {time.perf_counter() - start:.0f} s")
    print(f"  lowercased BLEU = {bleu_lc:.2f}  ({signature_lc}); chrF = {chrf:.2f}  "
          f"({chrf_signature})")
    return 0


if __name__ == "__main__":
    sys.exit(distributed.run_main(main))
