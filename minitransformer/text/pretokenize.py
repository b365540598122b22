"""Pre-tokenization: the regex pattern that cuts text into words before BPE merges them, bounded
before it is compiled and timed while it runs.

A pattern comes from the user or from a file (a tokenizer, or one embedded in a checkpoint), so it
is untrusted: `regex.compile` expands counted repeats (`a{2000000000}`, `(?:a{1000}){1000}{1000}`)
into gigabytes before anything else could look at it, and a pattern can backtrack catastrophically
(`(?:x|x)*y`: 2^n steps on n letters). So, before `regex.compile`: at most MAX_PATTERN_CHARS
characters, and at most MAX_PATTERN_UNITS in (pattern length) x (the product of every counted
repeat's largest count, `{n}`, `{n,m}`, `{n,}`, wherever it stands): an upper bound of what
compiling may expand to, nested or not, that needs no parse of the pattern. After it: the pattern
must cut PROBE into words within PATTERN_SECONDS, and every custom pattern runs under a time budget
per FILE (or batch of lines) encoded, PATTERN_SECONDS per 100,000 characters, shared by all of its
calls: a pattern that takes a second on each of 200 short lines stops after the first budget, not
after 200. The project's own PATTERN matches every character and runs without one.
Imports only checks.py of the package (lesson 08).
"""
import re
import time

import regex

from ..checks import fail

# A word is an optional leading space and then a run of letters (with their combining marks, and
# inner ' ’ or - joining letters: "T-Shirt", "man's", "l'homme"), a run of digits or a run of
# other symbols; whitespace stands alone. It is GPT-2's pattern without its English contractions
# ('s 't 're ...), which suits European languages: on Multi30k it gives fewer validation tokens
# than GPT-2's pattern (benchmarks/README.md, 'BPE learner').
PATTERN = r" ?[\p{L}\p{M}]+(?:['’-][\p{L}\p{M}]+)*| ?\p{N}+| ?[^\s\p{L}\p{M}\p{N}]+|\s+(?!\S)|\s+"
PROBE = ("Ab1 2,.!\n\t\r  e\u0301 日本 😀\x00-'’\u200d<>"
         + "".join(c * 48 + "!" for c in "a1 -"))
PATTERN_SECONDS = 1.0
BUDGET_CHARACTERS = 100_000
# GPT-4's pattern has 180 characters and one {1,3}: 540 units; a{100000} compiles in 0.5 s, 40 MB
MAX_PATTERN_CHARS = 4096
MAX_PATTERN_UNITS = 100_000
REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")


def check_pattern(pattern, owner="BPE"):
    """Refuse (SettingError naming `pattern`) what compiling could blow up: not a str, empty,
    longer than MAX_PATTERN_CHARS, or over MAX_PATTERN_UNITS; nothing is compiled here."""
    shown = repr(pattern[:60]) + ("..." if len(pattern) > 60 else "") \
        if isinstance(pattern, str) else repr(pattern)[:60]
    if not isinstance(pattern, str):
        fail(owner, f"the pre-tokenization pattern must be a str, got {shown}", "pattern", pattern)
    if not pattern:
        fail(owner, "the pre-tokenization pattern is empty: it would encode every text to []",
             "pattern", pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        fail(owner, f"the pattern {shown} has {len(pattern):,} characters, more than "
             f"{MAX_PATTERN_CHARS:,}", "pattern", pattern)
    units = len(pattern)
    for m in REPEAT.finditer(pattern):
        low, high = m.groups()
        digits = [g for g in (low, high) if g]
        count = MAX_PATTERN_UNITS + 1 if any(len(g) > 9 for g in digits) \
            else max(map(int, digits), default=1) + (high == "")     # {n,}: n + 1 copies
        units *= max(count, 1)
        if units > MAX_PATTERN_UNITS:
            fail(owner, f"the pattern {shown} repeats too much: its length times its counted "
                 f"repeats ({m.group(0)} and those before it) pass {MAX_PATTERN_UNITS:,}, more "
                 "than compiling it may expand to", "pattern", pattern)


class Splitter:
    """A checked, compiled pattern: findall(text, budget) gives the words of text.

    Splitter(PATTERN).findall("a cat") -> ["a", " cat"]
    """

    def __init__(self, pattern=PATTERN, owner="BPE"):
        check_pattern(pattern, owner)
        self.pattern = pattern
        self.source = "the tokenizer"          # set by the caller: errors name its file
        self.custom = pattern != PATTERN
        self.regex = regex.compile(pattern)
        # a pattern that backtracks catastrophically: a TimeoutError names it
        if self.regex.groups or "".join(self.findall(PROBE)) != PROBE:
            fail(owner, f"the pattern {pattern[:60]!r} does not cut every text into words (it "
                 "drops characters or has a capturing group): encode would lose text",
                 "pattern", pattern)

    @staticmethod
    def budget(n_characters):
        """A time budget for encoding n_characters in all (one file, one batch of lines): a
        one-item list of seconds left, that findall spends."""
        return [PATTERN_SECONDS * (1 + n_characters // BUDGET_CHARACTERS)]

    def findall(self, text, budget=None):
        """The words of text; a custom pattern spends `budget` (a fresh one for text alone when
        None) and raises a TimeoutError naming the pattern and its file when it is spent."""
        if not self.custom:
            return self.regex.findall(text)
        budget = self.budget(len(text)) if budget is None else budget
        start = time.perf_counter()
        try:
            if budget[0] <= 0:
                raise TimeoutError
            return self.regex.findall(text, timeout=budget[0])
        except TimeoutError:
            raise TimeoutError(f"the pattern {self.pattern[:60]!r} of {self.source} backtracks "
                               "catastrophically: it ran out of its time budget of "
                               f"{PATTERN_SECONDS:g} s per {BUDGET_CHARACTERS:,} characters "
                               "of the text encoded") from None
        finally:
            budget[0] -= time.perf_counter() - start
