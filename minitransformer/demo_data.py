"""The offline demo's translation task: numbers in digits -> the same numbers in English words.

"3 4 1 7 , 1 2" -> "three thousand four hundred seventeen , twelve". Digits are spaced so that each
is a token of its own (any tokenizer keeps them apart), and attention has a visible alignment to
learn: a digit's place (thousands, hundreds, tens) decides its words; spaced=False gives "3417, 12".
Small enough for the tiny model to learn on a CPU in minutes; no download.
Left out on purpose: "and" (British "one hundred and one"), hyphens ("forty-five"), numbers >= 10^6.
"""
import numpy as np

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _below_thousand(n):
    """Words of 1 <= n <= 999 as a list: 905 -> ["nine", "hundred", "five"]."""
    words = []
    if n >= 100:
        words += [ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10])
        n %= 10
    if n:
        words.append(ONES[n])
    return words


def number_to_words(n):
    """English words for 0 <= n < 1,000,000, without "and" or hyphens.

    number_to_words(3417) -> "three thousand four hundred seventeen"
    (3417 = 3 thousands, then 417 = 4 hundreds + 17: "three thousand" + "four hundred" + "seventeen")
    """
    n = int(n)
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_to_words covers 0 to 999,999, got {n}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = (_below_thousand(thousands) + ["thousand"]) if thousands else []
    return " ".join(words + (_below_thousand(rest) if rest else []))


def digits(n, spaced=True):
    """The number in digits, one token per digit when spaced: digits(907) -> "9 0 7"."""
    return " ".join(str(n)) if spaced else str(n)


def _draw_lines(rng, m, max_numbers, max_digits):
    """m lists of 1..max_numbers numbers; a number's digit count is uniform in 1..max_digits, so
    short numbers are as common as long ones."""
    counts = rng.integers(1, max_numbers + 1, size=m)
    k = rng.integers(1, max_digits + 1, size=int(counts.sum()))   # digits per number
    values = rng.integers(np.where(k == 1, 0, 10 ** (k - 1)), 10 ** k).tolist()
    ends = np.cumsum(counts).tolist()
    return [values[e - c:e] for c, e in zip(counts.tolist(), ends)]


def generate(n, seed=0, max_numbers=3, max_digits=4, spaced=True):
    """n distinct (source, target) line pairs, each of 1 to max_numbers numbers of up to max_digits digits.

    generate(2, seed=0) -> (["8 5 , 7 1 9 6 , 7 3 3", "3 , 8 8"],
                            ["eighty five , seven thousand one hundred ninety six , seven hundred thirty three",
                             "three , eighty eight"])
    spaced=False writes the sources as "85, 7196, 733". The same seed gives the same lines; sources are distinct, so
    any split of them is disjoint.
    """
    assert 1 <= max_digits <= 6 and max_numbers >= 1, "max_digits must be 1..6, max_numbers at least 1"
    rng = np.random.default_rng(seed)
    seen, src, tgt = set(), [], []
    for _ in range(50):  # rounds of drawing; each round asks for what is still missing, and more
        if len(src) == n:
            return src, tgt
        for numbers in _draw_lines(rng, 2 * (n - len(src)) + 16, max_numbers, max_digits):
            line = " , ".join(digits(x) for x in numbers) if spaced else ", ".join(map(str, numbers))
            if line not in seen and len(src) < n:
                seen.add(line)
                src.append(line)
                tgt.append(" , ".join(number_to_words(x) for x in numbers))
    if len(src) < n:
        raise ValueError(f"cannot draw {n:,} distinct lines with max_numbers={max_numbers}, "
                         f"max_digits={max_digits}: there are too few")
    return src, tgt


def split(src, tgt, n_heldout, seed=0):
    """Split pairs into (train_src, train_tgt), (heldout_src, heldout_tgt) at random, so that no
    held-out source appears in training (duplicated sources all go to one side)."""
    assert len(src) == len(tgt), "split needs as many sources as targets"
    rng = np.random.default_rng(seed)
    unique = sorted(set(src))
    assert n_heldout < len(unique), f"cannot hold out {n_heldout} of {len(unique)} distinct sources"
    held = set(unique[i] for i in rng.choice(len(unique), size=n_heldout, replace=False))
    train = [(s, t) for s, t in zip(src, tgt) if s not in held]
    heldout = [(s, t) for s, t in zip(src, tgt) if s in held]
    unzip = lambda pairs: ([s for s, _ in pairs], [t for _, t in pairs])
    return unzip(train), unzip(heldout)


def make_splits(n_train, n_valid, n_test, seed=0, **kwargs):
    """Train, valid and test (src, tgt) lists, drawn together so that all three are disjoint."""
    src, tgt = generate(n_train + n_valid + n_test, seed, **kwargs)
    a, b = n_train, n_train + n_valid
    return (src[:a], tgt[:a]), (src[a:b], tgt[a:b]), (src[b:], tgt[b:])
