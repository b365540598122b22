"""Tune the decoding of a finished training run on the validation set, one setting at a time: how
many of the last checkpoints to average, the beam size, the length penalty alpha. Test data is never
read: pick the settings here, then score test once.

    python examples/tune_decoding.py runs/multi30k
    python examples/tune_decoding.py runs/multi30k --average 1 5 10 --beam 1 4 8 --alpha 0.6 1.0

Starting from --base (average 5, beam 4, alpha 0.6: the paper's section 6.1), each axis is varied
alone with the others at their base value; every row is one decoding of the whole validation set
(Multi30k val: 1,014 sentences) with cased and lowercased sacreBLEU, chrF and the decoding seconds.
The run directory must still hold the checkpoints averaged (train with --average 10 to keep 10).
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from minitransformer.run import checkpoint as ckpt  # noqa: E402
from minitransformer.run import rundir  # noqa: E402
from minitransformer.checks import SettingError  # noqa: E402
from minitransformer.config import SearchConfig  # noqa: E402
from minitransformer.text.corpus import read_parallel  # noqa: E402
from minitransformer.run.metrics import corpus_bleu, corpus_chrf  # noqa: E402
from minitransformer.run.translation import translate_lines  # noqa: E402
from minitransformer.transformer import Transformer, TransformerConfig  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "multi30k"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="the --out directory of a training run")
    p.add_argument("--data-dir", type=Path,
                   default=SHARED if SHARED.exists() else Path("data/multi30k"),
                   help="where val.de.gz and val.en.gz are")
    p.add_argument("--average", type=int, nargs="+", default=[1, 5, 10], help="default: 1 5 10")
    p.add_argument("--beam", type=int, nargs="+", default=[1, 4, 8], help="default: 1 4 8")
    p.add_argument("--alpha", type=float, nargs="+", default=[0.6, 1.0],
                   help="0 to 10 (default: 0.6 1.0)")
    p.add_argument("--sentences", type=int,
                   help="only the first N validation sentences (a quick check)")
    p.add_argument("--base", type=float, nargs=3, default=[5, 4, 0.6],
                   metavar=("AVERAGE", "BEAM", "ALPHA"),
                   help="the setting each axis starts from (default: 5 4 0.6)")
    args = p.parse_args(argv)
    base = (int(args.base[0]), int(args.base[1]), args.base[2])
    if min(args.average + [base[0]]) < 1:
        p.error(f"--average and --base's AVERAGE must be at least 1, got "
                f"{min(args.average + [base[0]])}")
    try:                                              # every beam and alpha, checked as search will
        searches = {(b, a): SearchConfig(beam_size=b, alpha=a) for b in args.beam + [base[1]]
                    for a in args.alpha + [base[2]]}
    except SettingError as e:
        p.error(e.renamed({"beam_size": "--beam (or --base's BEAM)",
                           "alpha": "--alpha (or --base's ALPHA)"}))
    if args.sentences is not None and args.sentences < 1:
        p.error(f"--sentences must be at least 1, got {args.sentences}")
    if not args.run.is_dir():
        p.error(f"{args.run} is not a directory: give the --out directory of a training run")
    found = rundir.list_checkpoints(str(args.run))
    need = max(args.average + [int(args.base[0])])
    if len(found) < need:
        p.error(f"{args.run} holds {len(found)} step checkpoints; averaging {need} needs that many")
    for name in ("val.de.gz", "val.en.gz"):
        if not (args.data_dir / name).exists():
            p.error(f"--data-dir: {args.data_dir / name} not found")
    src, ref = read_parallel(args.data_dir / "val.de.gz", args.data_dir / "val.en.gz")
    src, ref = src[:args.sentences], ref[:args.sentences]
    settings = [base] + [(a, base[1], base[2]) for a in args.average] + [(base[0], b, base[2])
                                                                         for b in args.beam] \
        + [(base[0], base[1], al) for al in args.alpha]
    settings = list(dict.fromkeys(settings))             # each once, the base first
    print(f"{args.run}: last step {rundir.step_of(found[-1])}; validation {len(src)} sentences\n")
    print("| averaged | beam | alpha | val BLEU | lowercased | chrF | decoding s |")
    print("|---|---|---|---|---|---|---|")
    models = {}
    for average, beam, alpha in settings:
        if average not in models:
            averaged = ckpt.average(found[-average:])
            model = Transformer(TransformerConfig.from_dict(averaged.meta["config"]))
            model.load_state_dict(averaged.model)
            models[average] = (model, ckpt.tokenizer_from_json(averaged.meta["tokenizer"]))
        model, tokenizer = models[average]
        start = time.perf_counter()
        hyps = translate_lines(model, tokenizer, src, searches[beam, alpha])
        seconds = time.perf_counter() - start
        bleu, _ = corpus_bleu(hyps, [ref])
        lc, _ = corpus_bleu(hyps, [ref], lowercase=True)
        chrf, _ = corpus_chrf(hyps, [ref])
        print(f"| {average} | {beam} | {alpha} | {bleu:.2f} | {lc:.2f} | {chrf:.2f} | "
              f"{seconds:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
