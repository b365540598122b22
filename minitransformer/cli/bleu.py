"""`python -m minitransformer bleu`: the score of translations, sacreBLEU's corpus BLEU of a
hypothesis file against one or more reference files.

Left out on purpose: tokenized BLEU, chrF/TER (sacrebleu's own command line has them).
"""
from minitransformer.run.metrics import corpus_bleu
from minitransformer.text.fileio import read_lines

from .common import UsageError, examples, existing, help_formatter, prints, same_file


def add_parser(subparsers):
    """Register `bleu` on an argparse subparsers object."""
    bleu = subparsers.add_parser(
        "bleu", help="sacreBLEU of a hypothesis file against references",
        formatter_class=help_formatter,
        description="Corpus BLEU with sacreBLEU's defaults (13a tokenization, exp smoothing) of "
                    "detokenized hypotheses against one or more reference files of equal length; "
                    "prints the score and sacreBLEU's signature.",
        epilog=examples("bleu hyp.en ref.en", "bleu hyp.en ref1.en ref2.en",
                        "bleu - ref.en < hyp.en"))
    bleu.add_argument("hypotheses", help="hypothesis file, one line per sentence ('-': stdin)")
    bleu.add_argument("references", nargs="+", help="reference file(s), .gz accepted")
    bleu.set_defaults(func=run_bleu)
    return bleu


@prints
def run_bleu(args):
    """Print the corpus BLEU of the hypotheses and sacreBLEU's signature; the exit code."""
    existing(args.hypotheses, "hypothesis file")
    for path in args.references:
        existing(path, "reference file")
    if args.references.count("-") + (args.hypotheses == "-") > 1:
        raise UsageError("stdin ('-') can be read once: "
                         "give it for the hypotheses or one reference file")
    for n, path in enumerate(args.references):
        if same_file(path, args.hypotheses):
            raise UsageError(f"reference file {path} is the hypothesis file {args.hypotheses}: "
                             "its BLEU would be 100; give the reference translations")
        if any(same_file(p, path) for p in args.references[:n]):
            raise UsageError(f"reference file {path} is given twice; "
                             "it would count as two references (nrefs:2)")
    hypotheses = read_lines(args.hypotheses)
    if not hypotheses:
        name = "stdin" if args.hypotheses == "-" else args.hypotheses
        raise UsageError(f"hypothesis file {name} is empty: there are no sentences to score")
    references = [read_lines(path) for path in args.references]
    for path, lines in zip(args.references, references):
        if len(lines) != len(hypotheses):
            raise UsageError(f"reference file {path} has {len(lines)} lines "
                             f"but the hypotheses have {len(hypotheses)}")
    try:
        score, signature = corpus_bleu(hypotheses, references)
    except MemoryError:  # sacreBLEU holds every sentence's statistics: about 800 bytes a line
        raise RuntimeError(f"BLEU of {len(hypotheses):,} sentences needs more memory than this "
                           "machine gives: score the file in parts") from None
    print(f"BLEU = {score:.2f}")
    print(f"signature: {signature}")
    return 0
