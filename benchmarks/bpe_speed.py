"""Speed, peak memory and compression of bpe.py's learner, beside other BPE learners where
installed.

    python benchmarks/bpe_speed.py [--data-dir ../shared/data] [--vocab-size 10000] [--repeats 3]
                                   [--corpora multi30k english_mono]
                                   [--tools ours naive hf spm subword-nmt]

Learns a vocabulary on Multi30k's training text (train.de + train.en, 3.9 MB) and on all of
english_mono/*.gz (14 MB). Each run is a fresh worker process, so its peak resident memory
(ru_maxrss) is its own; the time is the best of --repeats runs (wall clock; CPU time beside it).
Compression: total tokens on Multi30k's validation set (val.de + val.en, each line encoded alone),
for the vocabularies learned on Multi30k. The other tools are optional (sentencepiece, tokenizers,
subword-nmt) and skipped with a note when they cannot be imported; all tools read the same
decompressed text files.
"""
import argparse
import gzip
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"ours": "minitransformer.text.bpe (pure Python)",
         "naive": "minitransformer.text.bpe, train_naive",
         "hf": "HF tokenizers, ByteLevelBPETokenizer", "spm": "sentencepiece, model_type=bpe",
         "subword-nmt": "subword-nmt learn_bpe (total_symbols)"}
MODULES = {"hf": "tokenizers", "spm": "sentencepiece", "subword-nmt": "subword_nmt"}


def load_bpe():
    """minitransformer.text.bpe without the package's __init__ (which loads the engine): a bare
    package over the same folder, so that bpe.py's relative imports (bpe_learn,
    fileio, checks) alone are loaded."""
    if "minitransformer" not in sys.modules:
        package = types.ModuleType("minitransformer")
        package.__path__ = [str(ROOT / "minitransformer")]
        sys.modules["minitransformer"] = package
    return importlib.import_module("minitransformer.text.bpe")


def learn_and_count(tool, files, vocab_size, val_lines, workdir):
    """Learn with one tool; return (tokens on val_lines or None, vocab size). Runs in the worker."""
    if tool in ("ours", "naive"):
        tok = load_bpe().BPE.train([Path(f) for f in files], vocab_size, progress=False,
                                   naive=tool == "naive")
        return lambda: sum(len(tok.encode(line)) for line in val_lines), tok.vocab_size
    if tool == "hf":
        from tokenizers import ByteLevelBPETokenizer
        tok = ByteLevelBPETokenizer()
        tok.train(files, vocab_size=vocab_size, min_frequency=2, show_progress=False,
                  special_tokens=["<pad>", "<s>", "</s>"])
        return lambda: sum(len(e.ids) for e in tok.encode_batch(val_lines)), tok.get_vocab_size()
    if tool == "spm":
        import sentencepiece as spm
        prefix = os.path.join(workdir, "spm")
        spm.SentencePieceTrainer.train(input=",".join(files), model_prefix=prefix,
                                       vocab_size=vocab_size, model_type="bpe",
                                       character_coverage=1.0, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        return lambda: sum(len(ids) for ids in sp.encode(val_lines)), sp.get_piece_size()
    if tool == "subword-nmt":
        from subword_nmt.apply_bpe import BPE as Apply
        from subword_nmt.learn_bpe import learn_bpe
        codes = os.path.join(workdir, "codes")
        with open(codes, "w", encoding="utf-8") as out:
            # learn_bpe reads one stream: join the files through a generator of lines
            learn_bpe((line for f in files for line in open(f, encoding="utf-8")), out, vocab_size,
                      min_frequency=2, total_symbols=True)
        with open(codes, encoding="utf-8") as f:
            apply = Apply(f)
        return lambda: sum(len(apply.process_line(line).split()) for line in val_lines), None
    raise ValueError(f"unknown tool {tool!r}; choose from {', '.join(TOOLS)}")


def worker(args):
    """One measured run in this fresh process; prints one JSON line."""
    val_lines = json.loads(Path(args.val).read_text(encoding="utf-8")) if args.val else []
    # not timed
    load_bpe() if args.worker in ("ours", "naive") else __import__(MODULES[args.worker])
    with tempfile.TemporaryDirectory() as workdir:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        wall, cpu = time.perf_counter(), time.process_time()
        count_val, vocab = learn_and_count(args.worker, args.files, args.vocab_size, val_lines,
                                           workdir)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        tokens = count_val() if val_lines else None
    print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "peak_mib": peak / 1024,
                      "start_mib": rss_before / 1024, "val_tokens": tokens, "vocab": vocab}))


def measure(tool, files, vocab_size, val_path, repeats):
    """Best of `repeats` fresh worker runs, or a one-line reason why the tool did not run."""
    if tool in MODULES and importlib.util.find_spec(MODULES[tool]) is None:
        return f"not installed (pip install {MODULES[tool].replace('_', '-')})"
    best = None
    for _ in range(repeats):
        cmd = [sys.executable, __file__, "--worker", tool, "--vocab-size", str(vocab_size),
               "--files", *files]
        run = subprocess.run(cmd + (["--val", val_path] if val_path else []), capture_output=True,
                             text=True)
        if run.returncode != 0:
            return "failed: " + (run.stderr.strip().splitlines() or ["?"])[-1]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        if best is None or result["seconds"] < best["seconds"]:
            best = result
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                   help="folder holding multi30k/ and english_mono/ (default: ../shared/data from "
                        "the repo)")
    p.add_argument("--vocab-size", type=int, default=10000,
                   help="ids in all: specials, bytes, merges (default: 10000)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per measure; the fastest is kept (default: 1)")
    p.add_argument("--corpora", nargs="+", default=["multi30k", "english_mono"],
                   choices=["multi30k", "english_mono"])
    p.add_argument("--tools", nargs="+", default=["ours", "hf", "spm", "subword-nmt"],
                   choices=list(TOOLS), help="'naive' (the reference learner) takes hours at "
                                             "10,000: use a small --vocab-size")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--files", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--val", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)  # its peak memory is the tool's: nothing else is loaded before

    bpe = load_bpe()
    if not bpe.MIN_VOCAB <= args.vocab_size <= bpe.MAX_VOCAB:
        p.error(f"--vocab-size must be between {bpe.MIN_VOCAB} (<pad> <s> </s> and the 256 bytes) "
                f"and {bpe.MAX_VOCAB:,}, got {args.vocab_size:,}")
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    data = Path(args.data_dir)
    if not data.is_dir():
        p.error(f"--data-dir {data} {'is a file' if data.exists() else 'does not exist'}: give the "
                f"folder holding multi30k/ and english_mono/")
    corpora = {"multi30k": [data / "multi30k" / f
                            for f in ("train.de.gz", "train.en.gz", "val.de.gz", "val.en.gz")],
               "english_mono": sorted((data / "english_mono").glob("*.gz"))}
    for name in args.corpora:
        if not all(f.is_file() for f in corpora[name]) or not corpora[name]:
            p.error(f"no .gz files for {name} under {data} (multi30k: train and val .de.gz and "
                    f".en.gz); pass --data-dir")
    val_files, corpora["multi30k"] = corpora["multi30k"][2:], corpora["multi30k"][:2]
    try:  # validation lines: for the vocabularies learned on multi30k only
        val_lines = [line.rstrip("\n") for f in val_files if "multi30k" in args.corpora
                     for line in gzip.open(f, "rt", encoding="utf-8")]
    except (OSError, EOFError, UnicodeDecodeError) as e:
        sys.exit(f"bpe_speed.py: error: the validation files {', '.join(map(str, val_files))} are "
                 f"not gzip-compressed UTF-8 text ({e})")
    val_words = sum(len(line.split()) for line in val_lines)
    failed = 0

    with tempfile.TemporaryDirectory() as tmp:
        val_path = os.path.join(tmp, "val.json")
        Path(val_path).write_text(json.dumps(val_lines), encoding="utf-8")
        for name in args.corpora:
            plain = []  # every tool reads the same decompressed text
            for f in corpora[name]:
                plain.append(os.path.join(tmp, f.name[:-3]))
                try:
                    Path(plain[-1]).write_bytes(gzip.open(f).read())
                except (OSError, EOFError) as e:
                    sys.exit(f"bpe_speed.py: error: {f} is not a gzip-compressed file ({e})")
            size = sum(os.path.getsize(f) for f in plain) / 1e6
            print(f"\n{name}: {', '.join(f.name for f in corpora[name])} ({size:.1f} MB), "
                  f"vocab size {args.vocab_size}, best of {args.repeats}")
            if name == "multi30k":
                print(f"validation: val.de + val.en, {len(val_lines)} lines, {val_words:,} words")
            print(f"{'tool':42s} {'seconds':>8s} {'cpu s':>7s} {'peak MiB':>9s} "
                  f"{'val tokens':>11s} {'tok/word':>8s}")
            for tool in args.tools:
                r = measure(tool, plain, args.vocab_size, val_path if name == "multi30k" else None,
                            args.repeats)
                if isinstance(r, str):
                    print(f"{TOOLS[tool]:42s} {r}")
                    failed += r.startswith("failed")
                    continue
                tokens = (f"{r['val_tokens']:>11,d} {r['val_tokens'] / val_words:>8.3f}"
                          if r["val_tokens"] else "")
                print(f"{TOOLS[tool]:42s} {r['seconds']:>8.2f} {r['cpu_seconds']:>7.2f} "
                      f"{r['peak_mib']:>9.0f} {tokens}", flush=True)

    # a tool that is not installed is skipped, one that failed is an error
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
