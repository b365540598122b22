"""Every figure on the front page is found in the file it links.

    python benchmarks/check_figures.py                      # README.md's "Results" section
    python benchmarks/check_figures.py --readme other.md --section Results --section Speed

Reads the sections of a Markdown file whose heading starts with a --section name (default:
"Results") and cuts them into units: a table row is a unit, and so is each sentence of a paragraph.
A figure is a measured number: one with a decimal point (41.34, 0.78x, 2.11), or a whole number
followed by a unit (96%, 142 s, 35 min); counts such as "3,200 updates" or "2-core" are not figures.
Code spans, HTML comments and link targets are left out. Each figure of a unit must appear, as a
number of its own, in a file linked from the same unit (a sentence without a link uses the links of
its paragraph); a link to a folder stands for every text file under it. A figure found in none of
them, or a unit with figures and no file linked, is reported with its line: the exit status is 1
when anything is reported, 0 when every figure was found.
"""
import argparse
import re
import sys
from pathlib import Path

UNITS = r"(?:%|x\b|\s?(?:ms|s|min|minutes|seconds|h|hours|MB|GB|GiB)\b)"
NUMBER = r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
# a number, then optionally "-" and a second number (a range), then optionally a unit
FIGURE = re.compile(NUMBER + r"(?:-(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?)?(" + UNITS + r")?")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z\[*(])")
MAX_BYTES = 5_000_000       # a linked file is read up to this size (logs are far smaller)


def figures(text):
    """The measured numbers of `text` (code spans, comments and link targets removed), as strings
    without thousands commas: '41.34', '142', '0.75', '0.80'."""
    text = re.sub(r"<!--.*?-->", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = LINK.sub(lambda m: " " if "/" in m.group(1) else m.group(1), text)
    found = []
    for m in FIGURE.finditer(text):
        first = (m.group(1) + (m.group(2) or "")).replace(",", "")
        second = (m.group(3) + (m.group(4) or "")).replace(",", "") if m.group(3) else None
        unit = m.group(5)
        if m.group(2) or unit:
            found.append(first)
        if second and (m.group(4) or unit):
            found.append(second)
    return found


def links(text, base):
    """The local files and folders that `text` links to, as paths (web links left out)."""
    paths = []
    for m in LINK.finditer(text):
        target = m.group(2).split("#")[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            paths.append((base / target).resolve())
    return paths


def read_linked(path):
    """The text of a linked file, or of every text file under a linked folder ('' if missing)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    parts = []
    for p in files:
        if p.is_file() and p.stat().st_size <= MAX_BYTES:
            try:
                parts.append(p.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                continue            # a picture or other binary file holds no figure to read
    return "\n".join(parts)


def holds(text, figure):
    """Whether `figure` ('2110', '41.34') appears in `text` as a number of its own, with or without
    thousands commas."""
    parts = figure.split(".")
    with_commas = f"{int(parts[0]):,}" + "".join("." + p for p in parts[1:])
    for form in {figure, with_commas}:
        if re.search(r"(?<![\d.,])" + re.escape(form) + r"(?![\d])", text):
            return True
    return False


def sections(lines, names):
    """(line number, line) of every line under a heading that starts with one of `names`."""
    keep = False
    depth = 0
    for number, line in enumerate(lines, 1):
        heading = re.match(r"(#+)\s+(.*)", line)
        if heading:
            level = len(heading.group(1))
            if any(heading.group(2).startswith(n) for n in names):
                keep = True
                depth = level
                continue
            if keep and level <= depth:
                keep = False
        if keep:
            yield number, line


def units(numbered_lines):
    """(line number, text, links of its paragraph) for every table row and every sentence."""
    paragraph = []
    for number, line in list(numbered_lines) + [(0, "")]:
        stripped = line.strip()
        if stripped.startswith("|"):
            if not re.fullmatch(r"[|\s:-]+", stripped):
                yield number, stripped, None
            continue
        if stripped and not stripped.startswith("```"):
            paragraph.append((number, stripped))
            continue
        if paragraph:
            text = " ".join(t for _, t in paragraph)
            for sentence in SENTENCE_END.split(text):
                yield paragraph[0][0], sentence, text
            paragraph = []


def check(readme, names=("Results",)):
    """The problems found in `readme`'s sections `names`: a list of one-line messages."""
    readme = Path(readme)
    base = readme.resolve().parent
    lines = readme.read_text(encoding="utf-8").splitlines()
    problems = []
    cache = {}
    for number, text, paragraph in units(sections(lines, names)):
        wanted = figures(text)
        if not wanted:
            continue
        targets = links(text, base) or (links(paragraph, base) if paragraph else [])
        if not targets:
            problems.append(f"{readme.name}:{number}: {', '.join(wanted)} link no file")
            continue
        for t in targets:
            if t not in cache:
                cache[t] = read_linked(t) if t.exists() else None
        missing_files = [t for t in targets if cache[t] is None]
        for t in missing_files:
            problems.append(f"{readme.name}:{number}: the linked {t.relative_to(base)} is missing")
        text_of_files = "\n".join(cache[t] for t in targets if cache[t] is not None)
        for f in wanted:
            if not holds(text_of_files, f):
                problems.append(f"{readme.name}:{number}: {f} is in none of the files it links")
    return problems


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("--readme", default=str(Path(__file__).resolve().parents[1] / "README.md"),
                    help="the Markdown file to check (default: the repository's README.md)")
    ap.add_argument("--section", action="append", dest="sections",
                    help="a heading whose section is checked (repeatable; default: Results)")
    args = ap.parse_args(argv)
    if not Path(args.readme).is_file():
        ap.error(f"--readme {args.readme} is not a file")
    return args


def main(argv=None):
    args = parse_args(argv)
    problems = check(args.readme, tuple(args.sections or ("Results",)))
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)" if problems else "every figure is in the file it links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
