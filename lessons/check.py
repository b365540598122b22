"""Grade the build-it exercises of a lesson: your functions against minitransformer's own.

    python lessons/check.py 04                     # grade lessons/exercises/04_functional.py
    python lessons/check.py 04 softmax_backward    # one function only
    python lessons/check.py 04 --solutions         # grade the answers in lessons/solutions/
    python lessons/check.py 04 --module my_try.py  # grade any file that defines the functions
    python lessons/check.py                        # every lesson

Each function runs on several shapes and inputs (fixed seeds, so a failure repeats) and is compared
with what the package computes; a gradient also goes through mt.gradcheck. One line per function:
PASS, exact or within float64 round-off (with the largest difference), or FAIL with the largest
difference and a hint. A function that still raises NotImplementedError is "not implemented yet".
Your code may use 30 s of CPU time on each function (an endless loop fails, a busy machine does not
fail a right answer: CPU time is what your code computes, not how long it waits for a core), and
take 10 times as long on the clock; the grader's own work, its references, is not counted.
Every call is guarded: an input (the incoming gradient too) written into, or a result that shares
memory with an input or another result, fails with the argument's name; so does calling the
package's own form of the exercise (checks/own_work.py). A known mistake is named
only when a second case confirms it; otherwise the line says what differs and where.
Exit status: 0 when every function passes, 1 when one fails, 2 for a bad command line.

The checkers live in lessons/checks/, one file per lesson (its ITEMS, in order, and the known
mistakes behind its hints), and what they share in lessons/checks/common.py; the plausible wrong
answers every checker must fail, each with its hint, in lessons/checks/mistakes/; this file is the
command line.
"""
import argparse
import importlib
import importlib.util
import itertools
import re
import sys
import traceback
from pathlib import Path

LESSONS = Path(__file__).resolve().parent
ROOT = LESSONS.parent
for folder in (ROOT, LESSONS):                   # minitransformer, and the checks/ of this folder
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import minitransformer as mt  # noqa: E402
from checks.common import Clock, Fail, Grade, NotDone  # noqa: E402
from checks.own_work import guarded  # noqa: E402


def lesson_items():
    """{"04": ("04_functional", [(name, checker), ...]), "04b": ...}: the ITEMS of each
    lessons/checks/NN_topic.py (or NNb_topic.py, a second exercise of lesson NN)."""
    paths = sorted((LESSONS / "checks").glob("[0-9][0-9]*_*.py"))
    return {path.stem.split("_")[0]:
            (path.stem, importlib.import_module(f"checks.{path.stem}").ITEMS) for path in paths}


LESSON_ITEMS = lesson_items()
CPU_SECONDS = 30      # the CPU time your code may use on one function (or a file's top-level code)
WALL_TIMES = 10       # and, as a backstop for code that waits, that many times as long on the clock


def time_limit(g, seconds=None, per_thread=True):
    """A context that fails the grading `g` once your code (g.call, or code in g.timed()) has used
    `seconds` of CPU time (CPU_SECONDS by default: an endless loop?) or WALL_TIMES * `seconds` of
    wall-clock time (waiting for something?); the grader's own work, its references, does not
    count. Where signals allow it: common.Clock (per_thread=False: the process's CPU time, with no
    watchdog thread to start: cheaper for many short calls)."""
    seconds = CPU_SECONDS if seconds is None else seconds
    return Clock(g, seconds, WALL_TIMES * seconds, per_thread)


def load(path, _count=itertools.count()):
    """Import a Python file by its path (exercise files start with digits: no plain import)."""
    spec = importlib.util.spec_from_file_location(f"graded_{path.stem}_{next(_count)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade(lesson, path, only=()):
    """Print one line per function of `lesson` found in `path`; True when all pass."""
    _, items = LESSON_ITEMS[lesson]
    items = [(name, check) for name, check in items if not only or name in only]
    width = max(len(name) for name, _ in items)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"lesson {lesson}: {shown}")
    g = Grade(path)
    try:
        with time_limit(g), g.timed():           # top-level code runs too: an endless loop fails
            module = load(path)
    except (Exception, SystemExit) as e:         # exit() in the file would end the grader, status 0
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                 if Path(f.filename).resolve() == path]
        # (a SyntaxError says its line)
        where = f" (line {lines[-1]})" if lines and not isinstance(e, SyntaxError) else ""
        why = (str(e) if isinstance(e, Fail) else
               "it calls exit()" if isinstance(e, SystemExit) else f"{type(e).__name__}: {e}")
        module, broken = None, f"the file does not load: {why}{where}"
    passed = 0
    for name, check in items:
        g = Grade(path)
        fn = getattr(module, name, None) if module else None
        try:
            if module is None:
                raise Fail(broken)
            if fn is None:
                raise Fail(f"{path.name} defines no {name}")
            mt.seed(0)
            with guarded(name, path, module), time_limit(g):  # the package's form refused
                check(fn, g)
            g.finish()                           # a match no second case confirmed: unnamed
            status, text = "PASS", g.summary()
            passed += 1
        except NotDone as e:
            named = str(e) not in ("", name, "__init__", "forward")
            status, text = "FAIL", "not implemented yet" + (
                f" ({e} raises NotImplementedError)" if named else "")
        except Fail as e:
            status, text = "FAIL", str(e)
        except (Exception, SystemExit) as e:     # an answer of a shape the checker cannot read
            status, text = "FAIL", (g.pending[0] if g.pending else
                                    f"{g.case}: the grader could not use your answer: "
                                    f"{type(e).__name__}: {e}")
        finally:
            mt.use("cpu")
        print(f"  {status}  {name:<{width}}  {' '.join(text.split())}")
    print(f"  {passed} of {len(items)} passed" + ("" if passed < len(items) else ": well done"))
    return passed == len(items)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python lessons/check.py",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n\n")[1].splitlines()))
    parser.add_argument("lesson", nargs="?",
                        help=f"the lesson's number, {min(LESSON_ITEMS)} to {max(LESSON_ITEMS)}, or "
                             "its file's name (all lessons when left out)")
    parser.add_argument("items", nargs="*", help="grade only these functions")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--solutions", action="store_true",
                       help="grade lessons/solutions/ instead of your files")
    which.add_argument("--module", type=Path, metavar="FILE",
                       help="grade this file instead of your exercise file")
    args = parser.parse_intermixed_args(argv)   # check.py 04 --solutions softmax works too
    lessons = sorted(LESSON_ITEMS)
    if args.lesson is not None:
        # 4, 04, 04b, 04_functional, exercises/04b_x.py
        digits = re.match(r"(?:.*/)?(\d+)([a-z]?)", args.lesson)
        number = f"{int(digits[1]):02d}{digits[2]}" if digits else args.lesson
        if number not in LESSON_ITEMS:
            parser.error(f"no exercises for lesson {args.lesson!r}; lessons with exercises: "
                         f"{', '.join(lessons)}")
        lessons = [number]
        unknown = sorted(set(args.items) - {name for name, _ in LESSON_ITEMS[number][1]})
        if unknown:
            parser.error(f"lesson {number} has no exercise {', '.join(unknown)}; it has "
                         f"{', '.join(name for name, _ in LESSON_ITEMS[number][1])}")
    if args.module is not None and len(lessons) != 1:
        parser.error("--module grades one lesson: give its number too")
    if args.module is not None and not args.module.is_file():
        parser.error(f"--module: no file {args.module}")
    mt.use("cpu")
    ok = True
    for lesson in lessons:
        stem = LESSON_ITEMS[lesson][0]
        path = (args.module if args.module is not None else
                LESSONS / ("solutions" if args.solutions else "exercises") / f"{stem}.py").resolve()
        ok = grade(lesson, path, args.items) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
