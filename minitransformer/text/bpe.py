"""Byte-level BPE, the tokenizer: learn it from a corpus, encode text to ids, decode ids back to
text, and its JSON file.

Adds: regex pre-tokenization (its pattern bounded and timed: pretokenize.py), 256 byte tokens
(every string round-trips, no unknown token), special tokens, a JSON file format, read with its
sizes bounded before they are spent. The merge learners themselves are in bpe_learn.py.
Leaves out on purpose: Unicode normalization, BPE-dropout, vocabulary pruning, parallel counting.
Imports only bpe_learn, pretokenize, fileio and checks of the package (lesson 08).
"""
import json
import operator
import os
from collections import Counter

import regex

from .bpe_learn import (MAX_TOKEN_BYTES, MAX_VOCAB, apply_merges, learn_merges,  # noqa: F401
                        learn_merges_naive, merge)  # (merge: lesson 08)
from ..checks import FileError, SettingError, check_int, fail
from .fileio import JSONLimitError, atomic_write, parse_json, read_json, read_lines
from .pretokenize import PATTERN, PROBE, Splitter  # noqa: F401  (PROBE: lesson 08)

SPECIALS = ("<pad>", "<s>", "</s>")  # always ids 0, 1, 2; user special tokens follow
PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
# The limits: MIN_VOCAB = 259 ids (<pad> <s> </s> and the 256 bytes, no merge) up to
# MAX_VOCAB = 0x110000 = 1,114,112 ids (bpe_learn stores an id as a character); as merges are
# read, a token <= MAX_TOKEN_BYTES and all tokens <= MAX_VOCAB_BYTES (36 doublings fit in 833
# bytes and would ask for 64 GiB); at most MAX_SPECIALS special tokens of MAX_SPECIAL_CHARS each
# (they make one regex of alternatives, compiled at once).
MIN_VOCAB = len(SPECIALS) + 256
MAX_VOCAB_BYTES = 1 << 27
MAX_SPECIALS = 1024
MAX_WORDS = 1 << 21       # distinct words a BPE learns from (the learner holds ~300 bytes each)
MAX_SPECIAL_CHARS = 256
FORMAT = "minitransformer-bpe"
VERSION = 1


def _chunks(lines, size=1 << 20):
    """Join lines (with "\\n") into pieces of about size characters (bounds memory)."""
    piece = []
    n = 0
    for line in lines:
        piece.append(line)
        n += len(line) + 1
        if n >= size:
            yield "\n".join(piece) + "\n"
            piece = []
            n = 0
    if piece:
        yield "\n".join(piece) + "\n"


def _surrogate(text):
    """Words naming the first lone surrogate in text (UTF-8 cannot encode one), and where."""
    i = next(i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff")
    return (f"the lone surrogate {text[i]!r} at character {i}, which UTF-8 cannot encode "
            "(text read with errors='surrogateescape'?)")


# ---- the tokenizer ------------------------------------------------------------------------------

class BPE:
    """Byte-level BPE tokenizer. Ids: special tokens, then the 256 bytes, then one per merge."""

    def __init__(self, merges=(), special_tokens=(), pattern=PATTERN):
        if isinstance(special_tokens, str):
            raise TypeError("special_tokens takes a list of strings, not one str: "
                            f"[{special_tokens!r}]")
        if len(special_tokens) > MAX_SPECIALS:
            fail("BPE", f"{len(special_tokens):,} special tokens are too many: at most "
                 f"{MAX_SPECIALS:,}", "special_tokens", special_tokens)
        extra = [t for t in special_tokens if t not in SPECIALS]
        if not all(isinstance(t, str) and t and not t.isspace() and len(t) <= MAX_SPECIAL_CHARS
                   for t in extra):
            fail("BPE", f"special tokens must be non-empty strings of at most {MAX_SPECIAL_CHARS} "
                 f"characters, got {str(extra)[:200]}", "special_tokens", extra)
        if len(set(extra)) != len(extra):
            fail("BPE", f"special tokens are repeated: {extra}", "special_tokens", extra)
        self._splitter = Splitter(pattern)  # bounded before it is compiled, then timed
        self.source = "the tokenizer"      # what it came from, for messages: set by from_json
        self.special_tokens = list(SPECIALS) + extra
        self.pad_id = PAD_ID
        self.bos_id = BOS_ID
        self.eos_id = EOS_ID
        self.pattern = pattern
        longest_first = sorted(self.special_tokens, key=len, reverse=True)
        self._special_regex = regex.compile("(" + "|".join(map(regex.escape, longest_first)) + ")")
        self._special_ids = {t: i for i, t in enumerate(self.special_tokens)}
        self.offset = len(self.special_tokens)  # the id of byte 0
        self.vocab = [t.encode("utf-8") for t in self.special_tokens]
        self.vocab += [bytes([b]) for b in range(256)]
        self.merges = []
        self.ranks = {}  # pair -> id of the merged token (= merge order)
        total = 0
        if len(self.vocab) + len(merges) > MAX_VOCAB:
            raise ValueError(f"{len(self.vocab) + len(merges):,} ids are too many: "
                             f"at most {MAX_VOCAB:,}")
        for a, b in merges:
            name = f"merge {len(self.merges)} ({str(a)[:20]}, {str(b)[:20]})"
            if not (_is_id(a) and _is_id(b)):
                raise ValueError(f"{name} is not a pair of integer ids")
            a = operator.index(a)
            b = operator.index(b)
            if not (self.offset <= a < len(self.vocab) and self.offset <= b < len(self.vocab)):
                raise ValueError(f"{name} uses an id that is neither a byte nor an earlier merge")
            # at most 2 x MAX_TOKEN_BYTES: its parts passed this check
            token = self.vocab[a] + self.vocab[b]
            total += len(token)
            if len(token) > MAX_TOKEN_BYTES or total > MAX_VOCAB_BYTES:
                raise ValueError(f"{name} makes a token of {len(token):,} bytes, {total:,} in all: "
                                 f"at most {MAX_TOKEN_BYTES:,} and {MAX_VOCAB_BYTES:,}")
            if (a, b) in self.ranks:
                earlier = self.ranks[(a, b)] - self.offset - 256
                raise ValueError(f"{name} repeats merge {earlier}")
            self.ranks[(a, b)] = len(self.vocab)
            self.merges.append((a, b))
            self.vocab.append(token)
        self._byte_ids = {}  # bytes -> first id with those bytes (two merges may spell the same)
        for i in range(self.offset, len(self.vocab)):
            self._byte_ids.setdefault(self.vocab[i], i)
        self._cache = {}  # word -> ids

    @property
    def vocab_size(self):
        return len(self.vocab)

    # ---- learning --------------------------------------------------------------------------------

    @classmethod
    def train(cls, lines_or_paths, vocab_size, min_frequency=2, special_tokens=(), pattern=PATTERN,
              progress=False, naive=False):
        """Learn merges until vocab_size ids, or until no pair occurs min_frequency times.

        Items of lines_or_paths are lines of text (str) or files (pathlib.Path, .gz accepted).
        Ties: of the pairs with the highest count, the smallest (left id, right id) is merged.
        BPE.train(["low lower lowest"], 260, min_frequency=1).merges -> [(111, 114)]  ("l", "o")
        """
        check_int("BPE.train", "vocab_size", vocab_size, 0)
        check_int("BPE.train", "min_frequency", min_frequency, 1)
        tok = cls((), special_tokens, pattern)
        if vocab_size > MAX_VOCAB:
            fail("BPE.train", f"vocab_size {vocab_size:,} is too large: at most {MAX_VOCAB:,} ids",
                 "vocab_size", vocab_size)
        if vocab_size < tok.vocab_size:
            fail("BPE.train", f"vocab_size {vocab_size} is too small: the {tok.offset} special "
                 f"tokens and 256 bytes already take {tok.vocab_size} ids",
                 "vocab_size", vocab_size)
        words = tok.count_words(lines_or_paths)
        if all(w.isspace() for w in words):  # nothing, or blank lines only
            raise ValueError(f"the training corpus is empty: {_nothing_in(lines_or_paths)}")
        n_merges = vocab_size - tok.vocab_size
        try:
            if naive:
                merges = learn_merges_naive(words, n_merges, min_frequency, tok.offset)
            else:
                merges = learn_merges(words, n_merges, min_frequency, tok.offset, progress)
        except UnicodeEncodeError as e:
            raise ValueError(f"the corpus word {e.object!r} holds {_surrogate(e.object)}") from None
        return cls(merges, tok.special_tokens, pattern)

    @classmethod
    def train_naive(cls, lines_or_paths, vocab_size, min_frequency=2, special_tokens=(),
                    pattern=PATTERN):
        """The same as train(), by recounting every pair each merge: slow, plain, the reference."""
        return cls.train(lines_or_paths, vocab_size, min_frequency, special_tokens, pattern,
                         naive=True)

    def count_words(self, lines_or_paths):
        """Count the pre-tokenized words of a corpus; special tokens are cut out, not counted.

        count_words(["the cat", "the"]) -> Counter({"the": 2, " cat": 1})
        """
        if isinstance(lines_or_paths, (str, bytes)):
            raise TypeError("pass a list of lines (str) or of files (pathlib.Path), not one string")
        if isinstance(lines_or_paths, os.PathLike):
            lines_or_paths = [lines_or_paths]
        counts = Counter()
        items = list(lines_or_paths)
        budget = Splitter.budget(sum(len(i) for i in items if isinstance(i, str)))  # the lines'
        for item in items:
            if not isinstance(item, (str, os.PathLike)):
                raise TypeError(f"a corpus item must be a line (str) or a file (pathlib.Path), "
                                f"not {type(item).__name__}")
            if isinstance(item, str):
                counts.update(self._words(item, budget))
            else:  # a file, read line by line, bounded, as training reads it
                lines = read_lines(item)
                file_budget = Splitter.budget(sum(map(len, lines)))      # one budget per file
                for chunk in _chunks(lines):
                    counts.update(self._words(chunk, file_budget))
                del lines
            if len(counts) > MAX_WORDS:
                where = "the lines given" if isinstance(item, str) else os.fspath(item)
                raise ValueError(f"the corpus holds more than {MAX_WORDS:,} distinct words (in "
                                 f"{where}): too many to learn merges from in memory; learn "
                                 "from a sample of it")
        return counts

    def _words(self, text, budget=None):
        """Pre-tokenize text, leaving out special tokens: "a<s> b" -> ["a", " b"]; a custom
        pattern spends `budget` (Splitter.findall)."""
        findall = self._splitter.findall
        if any(t in text for t in self.special_tokens):
            return [w for part in self._special_regex.split(text)[::2]
                    for w in findall(part, budget)]
        return findall(text, budget)

    # ---- encoding and decoding -------------------------------------------------------------------

    def _encode_word(self, word):
        """Apply the merges to one word, lowest rank first, as training did.

        With the merges (a, a) then (aa, b), as ids: "aab" -> ["aab"], "aaab" -> ["aa", "a", "b"]
        """
        ids = self._cache.get(word)
        if ids is None:
            symbols = [b + self.offset for b in word.encode("utf-8")]
            ids = apply_merges(symbols, self.ranks)  # plain: apply_merges_naive
            if len(self._cache) >= 1 << 20:
                self._cache.clear()
            self._cache[word] = ids
        return ids

    def encode(self, text, add_bos=False, add_eos=False, special=False):
        """Text -> ids; <s> and </s> around it if asked. Text is text: the text "<pad>" is encoded
        as the characters < p a d >. With special=True (asked for explicitly), the text of a special
        token becomes its id instead (never split).

        encode("<s>hi", special=True) -> [1, id of "hi"]  (after enough merges)
        """
        if not isinstance(text, str):
            hint = ""
            if isinstance(text, bytes):
                hint = " (decode bytes first: text.decode('utf-8'))"
            elif isinstance(text, (list, tuple)):
                hint = " (encode_batch takes a list of them)"
            raise TypeError(f"encode takes one str, got {type(text).__name__}{hint}")
        return self._encode(text, add_bos, add_eos, special)

    def _encode(self, text, add_bos=False, add_eos=False, special=False, budget=None):
        """encode(), a custom pattern spending `budget` (Splitter.findall)."""
        ids = [BOS_ID] if add_bos else []
        parts = self._special_regex.split(text) if special else [text]
        try:
            for k, part in enumerate(parts):
                if k % 2:  # odd parts are special tokens
                    ids.append(self._special_ids[part])
                    continue
                words = self._splitter.findall(part, budget)
                if self._splitter.custom and sum(map(len, words)) != len(part):
                    raise ValueError(f"the pattern {self.pattern!r} drops characters of "
                                     f"{part[:40]!r}: encode would lose text")
                for word in words:
                    ids.extend(self._encode_word(word))
        except UnicodeEncodeError:
            raise ValueError(f"encode: the text {text[:40]!r} holds {_surrogate(text)}") from None
        if add_eos:
            ids.append(EOS_ID)
        return ids

    def encode_batch(self, texts, **kwargs):
        """encode() each text: encode_batch(["a", "b"]) -> [[ids of "a"], [ids of "b"]]. A custom
        pattern has one time budget for all of them (Splitter.budget of their characters), so
        that slow lines cannot add up to hours."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of texts, not one str "
                            "(that would encode each character apart)")
        texts = list(texts)
        custom = self._splitter.custom and all(isinstance(t, str) for t in texts)
        budget = Splitter.budget(sum(map(len, texts))) if custom else None
        return [self._encode(t, budget=budget, **kwargs) if isinstance(t, str) else self.encode(t)
                for t in texts]

    def decode(self, ids, skip_special=False):
        """Ids -> text. Bytes that do not form valid UTF-8 become U+FFFD.

        decode(encode(s)) == s for every str s that UTF-8 can encode.
        """
        try:
            ids = list(map(operator.index, ids))                      # 3.0 or "3" is no id
        except TypeError:
            raise TypeError("decode takes one sequence of integer ids, "
                            f"got {str(ids)[:60]}") from None
        if ids and not 0 <= min(ids) <= max(ids) < len(self.vocab):
            raise ValueError(f"ids must lie in 0..{len(self.vocab) - 1}; "
                             f"got {min(ids)}..{max(ids)}")
        if skip_special:
            ids = [i for i in ids if i >= self.offset]
        return b"".join([self.vocab[i] for i in ids]).decode("utf-8", errors="replace")

    def id_to_token(self, i):
        """The text of token i; bytes that are no whole character show as \\xNN: 259 -> "aa"."""
        if not 0 <= i < len(self.vocab):
            raise ValueError(f"id {i} is outside the vocabulary 0..{len(self.vocab) - 1}")
        return self.vocab[i].decode("utf-8", errors="backslashreplace")

    def token_to_id(self, token):
        """The id of a token given as text or bytes: token_to_id("<pad>") -> 0."""
        if isinstance(token, str) and token in self._special_ids:
            return self._special_ids[token]
        key = token.encode("utf-8") if isinstance(token, str) else bytes(token)
        if key not in self._byte_ids:
            raise KeyError(f"{token!r} is not a token of this vocabulary")
        return self._byte_ids[key]

    # ---- files -----------------------------------------------------------------------------------

    def to_json(self):
        """The text of the tokenizer file: one JSON object, one merge a line:
        [left id, right id, "merged text"]."""
        head = {"format": FORMAT, "version": VERSION, "pattern": self.pattern,
                "special_tokens": self.special_tokens}
        lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},"
                 for k, v in head.items()]
        merges = [json.dumps([a, b, self.id_to_token(self.offset + 256 + k)], ensure_ascii=False)
                  for k, (a, b) in enumerate(self.merges)]
        body = ",\n    ".join(merges)
        return "{\n" + "\n".join(lines) + '\n  "merges": [\n    ' + body + "\n  ]\n}\n"

    def save(self, path):
        """Write to_json() to path, atomically."""
        atomic_write(path, lambda f: f.write(self.to_json()), mode="w")

    @classmethod
    def load(cls, path):
        """Read a file that save() wrote; another version or a damaged file: checks.FileError.
        Read with its size capped (fileio.read_json): a device or an endless pipe is refused."""
        path = os.fspath(path)
        return cls._from_dict(read_json(path, "a tokenizer file"), path)

    @classmethod
    def from_json(cls, text, source="the tokenizer"):
        """The inverse of to_json; errors name `source` (a file name, or where the text is from)."""
        if not isinstance(text, str):
            raise FileError(source, None, "is not a tokenizer file: it is not JSON text")
        try:
            d = parse_json(text)
        except JSONLimitError as e:
            raise FileError(source, None, f"is refused as a tokenizer file: {e}") from None
        except ValueError as e:  # invalid JSON, or nested too deep
            raise _not_json(source, e) from None
        return cls._from_dict(d, source)

    @classmethod
    def _from_dict(cls, d, source):
        """The tokenizer of a parsed tokenizer file, every field checked; errors name `source`."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise FileError(source, None, f'is not a tokenizer file: it lacks "format": "{FORMAT}"')
        if d.get("version") != VERSION:
            raise FileError(source, None, f"has format version {str(d.get('version'))[:20]}, "
                                          f"but this code reads version {VERSION}")
        try:
            merges = d["merges"]
            if not isinstance(merges, list) or not isinstance(d["special_tokens"], list):
                raise ValueError("its merges and special_tokens must be JSON lists")
            for k, m in enumerate(merges):
                if not (isinstance(m, list) and len(m) == 3 and _is_id(m[0]) and _is_id(m[1])
                        and isinstance(m[2], str)):
                    raise ValueError(f"merge {k} is {str(m)[:60]}, not [left id, right id, "
                                     '"its text"]')
            tok = cls([(m[0], m[1]) for m in merges], d["special_tokens"], d["pattern"])
            tok.source = tok._splitter.source = source  # encode's errors name the file
            if d["special_tokens"] != tok.special_tokens:
                raise ValueError("the special tokens are out of order")
            for k, m in enumerate(merges):
                if tok.id_to_token(tok.offset + 256 + k) != m[2]:
                    raise ValueError(f"merge {k} {str(m)[:60]} does not spell its text")
        except SettingError as e:  # the file's pattern or special tokens
            raise FileError(source, None, f"is a damaged tokenizer file: {e.message}") from None
        except (KeyError, TypeError, IndexError, ValueError, regex.error, TimeoutError) as e:
            raise FileError(source, None, f"is a damaged tokenizer file: {e}") from None
        return tok


def _is_id(x):
    """x is an integer (not a bool): what a token id is."""
    return not isinstance(x, bool) and hasattr(type(x), "__index__")


def _nothing_in(lines_or_paths):
    """Why a corpus has no words: the files that hold none, or that there are none."""
    items = [lines_or_paths] if isinstance(lines_or_paths, os.PathLike) else lines_or_paths
    files = []
    if isinstance(items, list):
        files = [os.fspath(p) for p in items if isinstance(p, os.PathLike)]
    if not files:
        return "there are no words to learn merges from"
    return f"{', '.join(files)} hold{'s' * (len(files) == 1)} no text to learn merges from"


def _not_json(source, error):
    """The FileError of a tokenizer file that is not JSON."""
    return FileError(source, None, f"is not a tokenizer file: it is not valid JSON ({error})")
