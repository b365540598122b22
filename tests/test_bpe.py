"""Tests of bpe.py and cli/bpe.py: a hand-computed merge sequence learned by both learners, round trips
on arbitrary Unicode, the file format, special tokens, every error path (bpe_learn.py's learners
against each other: test_bpe_learn.py)."""
import argparse
import gzip
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from minitransformer import cli
from minitransformer.cli import bpe as bpe_command
from minitransformer.text.bpe import BPE, merge
from minitransformer.text.bpe_learn import apply_merges, apply_merges_naive, learn_merges

from conftest import CORPUS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tok():
    return BPE.train(CORPUS, vocab_size=400, min_frequency=2)


# ---- known answers -----------------------------------------------------------------------------

@pytest.mark.parametrize("naive", [False, True])
def test_wikipedia_example(naive):
    # https://en.wikipedia.org/wiki/Byte_pair_encoding on "aaabdaaabac", worked by hand:
    # pairs aa:4 (overlapping, in "aaa" twice), ab:2, bd da ba ac:1 -> Z = aa;  "ZabdZabac"
    # pairs Za:2, ab:2, others 1 -> tie; ab (a < Z) -> Y = ab;            "ZYdZYac"
    # pairs ZY:2, others 1 -> X = ZY;                                  "XdXac", then every pair is 1.
    # Ids: 3 special tokens, so byte c has id ord(c) + 3: a=100, b=101, c=102, d=103; Z=259, Y=260, X=261.
    learn = BPE.train_naive if naive else BPE.train
    tok = learn(["aaabdaaabac"], vocab_size=300, min_frequency=2)
    assert tok.merges == [(100, 100), (100, 101), (259, 260)]
    assert tok.vocab_size == 262
    assert [tok.id_to_token(i) for i in (259, 260, 261)] == ["aa", "ab", "aaab"]
    assert tok.encode("aaabdaaabac") == [261, 103, 261, 100, 102]  # X d X a c


def test_vocab_size_bounds_merges():
    tok = BPE.train(["aaabdaaabac"], vocab_size=260, min_frequency=1)  # room for one merge
    assert tok.merges == [(100, 100)]
    tok = BPE.train(["aaabdaaabac"], vocab_size=300, min_frequency=1)  # until the words are one token
    assert tok.encode("aaabdaaabac") == [tok.vocab_size - 1]


def test_pattern_words():
    words = BPE().count_words(["Ein Mann im T-Shirt, a man's 2024 café  ok\n"])
    assert list(words) == ["Ein", " Mann", " im", " T-Shirt", ",", " a", " man's", " 2024", " café",
                           " ", " ok", "\n"]


def test_encode_applies_merges_in_order(tok):
    # Lowest rank first (encode) gives what applying every merge in learned order gives (training).
    for word in BPE().count_words(CORPUS):
        ids = [b + tok.offset for b in word.encode("utf-8")]
        for k, pair in enumerate(tok.merges):
            ids = merge(ids, pair, tok.offset + 256 + k)
        assert tok.encode(word) == ids


def test_deterministic():
    shuffled = CORPUS[:]
    random.Random(0).shuffle(shuffled)
    a = BPE.train(CORPUS, 350)
    assert a.merges == BPE.train(CORPUS, 350).merges == BPE.train(shuffled, 350).merges


# ---- encode and decode --------------------------------------------------------------------------

ROUND_TRIP = ["", "a", "\x00", "\n\n \t", "naïve café", "cafe\u0301", "👩‍👩‍👧 🇩🇪 🐕", "日本語 текст العربية",
              "a\x00b\r\n", "<s>", "</s><pad>x", "<s", "\ufeff\ufffd", "\U0010ffff"]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip_examples(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, special=False)) == text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_any_unicode(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text


def test_merges_compress(tok):
    line = CORPUS[0]
    assert len(tok.encode(line)) < len(line.encode("utf-8")) / 2


def test_encode_batch_and_bos_eos(tok):
    assert tok.encode_batch(["a man", "Ein Mann"]) == [tok.encode("a man"), tok.encode("Ein Mann")]
    ids = tok.encode("a man", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id == 1 and ids[-1] == tok.eos_id == 2 and ids[1:-1] == tok.encode("a man")
    assert tok.decode(ids, skip_special=True) == "a man"
    assert tok.decode(ids) == "<s>a man</s>"


def test_vocab_lookups(tok):
    assert (tok.pad_id, tok.token_to_id("<pad>"), tok.token_to_id("<s>"), tok.token_to_id("</s>")) == (0, 0, 1, 2)
    assert tok.id_to_token(0) == "<pad>" and tok.id_to_token(3) == "\x00" and tok.id_to_token(3 + 0xC3) == "\\xc3" and tok.id_to_token(3 + 97) == "a"
    assert tok.token_to_id("a") == 100 and tok.token_to_id(b"\xc3") == 3 + 0xC3
    for i in range(3, tok.vocab_size):
        assert tok.token_to_id(tok.vocab[i]) <= i  # two merges may spell the same bytes
        assert tok.decode([i]) == tok.vocab[i].decode("utf-8", errors="replace")
    assert tok.vocab_size == 400 and len(tok.merges) == 400 - 259
    with pytest.raises(KeyError, match="not a token"):
        tok.token_to_id("no such token, surely")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.id_to_token(400)


# ---- special tokens -----------------------------------------------------------------------------

def test_special_tokens_never_split_nor_learned():
    lines = ["<s>hello</s> <mask> world<pad>"] * 20
    tok = BPE.train(lines, 300, special_tokens=["<mask>"])
    assert tok.special_tokens == ["<pad>", "<s>", "</s>", "<mask>"] and tok.offset == 4
    assert tok.encode("<s>hello</s> <mask>", special=True)[0] == 1 and 3 in tok.encode("x<mask>y", special=True)
    assert tok.encode("a<mask>b", special=True) == tok.encode("a") + [3] + tok.encode("b")
    for token in tok.vocab[tok.offset:]:
        assert not any(t.encode() in token for t in tok.special_tokens)
    assert len(tok.encode("hello")) == 1 and len(tok.encode(" world")) == 1  # the words were learned
    for text in ("<mask>", "<pad>", "</s>"):              # text is text, unless special=True is asked for
        plain = tok.encode(text)
        assert not set(plain) & {0, 1, 2, 3} and tok.decode(plain) == text


def test_special_tokens_bad():
    with pytest.raises(ValueError, match="non-empty"):
        BPE(special_tokens=[""])
    with pytest.raises(ValueError, match="repeated"):
        BPE(special_tokens=["<m>", "<m>"])
    with pytest.raises(ValueError, match="pattern is empty"):
        BPE(pattern="")
    with pytest.raises(ValueError, match="merge 1 .* repeats merge 0"):
        BPE(merges=[(100, 101), (100, 101)])
    with pytest.raises(ValueError, match="too large"):
        BPE.train(["a b"], 2_000_000)


# ---- files --------------------------------------------------------------------------------------

def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "tok.json"
    tok.save(path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["version"] == 1 and data["pattern"] == tok.pattern and len(data["merges"]) == len(tok.merges)
    assert '"Männer"' in text or "ä" in text  # human-readable: UTF-8 text, not \\u escapes
    assert text.count("\n") > len(tok.merges)  # one merge a line
    loaded = BPE.load(path)
    assert loaded.merges == tok.merges and loaded.special_tokens == tok.special_tokens
    for line in CORPUS + ROUND_TRIP:
        assert loaded.encode(line) == tok.encode(line)
    assert [p.name for p in tmp_path.iterdir()] == ["tok.json"]  # no temporary file left behind


def test_save_replaces_atomically(tok, tmp_path):
    path = tmp_path / "tok.json"
    BPE().save(path)
    tok.save(path)
    assert BPE.load(path).merges == tok.merges and len(list(tmp_path.iterdir())) == 1


def test_load_errors(tok, tmp_path):
    good = tmp_path / "good.json"
    tok.save(good)
    data = json.loads(good.read_text(encoding="utf-8"))

    def write(name, text):
        (tmp_path / name).write_text(text, encoding="utf-8")
        return tmp_path / name

    with pytest.raises(ValueError, match=r"v2.json has format version 2, but this code reads version 1"):
        BPE.load(write("v2.json", json.dumps({**data, "version": 2})))
    with pytest.raises(ValueError, match="cut.json is not a tokenizer file: it is not valid JSON"):
        BPE.load(write("cut.json", good.read_text(encoding="utf-8")[:200]))
    with pytest.raises(ValueError, match="is not a tokenizer file"):
        BPE.load(write("other.json", json.dumps({"model": "something else"})))
    bad_text = {**data, "merges": [[100, 100, "zz"]] + data["merges"][1:]}
    with pytest.raises(ValueError, match="damaged tokenizer file: merge 0"):
        BPE.load(write("text.json", json.dumps(bad_text)))
    bad_id = {**data, "merges": data["merges"] + [[99999, 100, "?"]]}
    with pytest.raises(ValueError, match="damaged tokenizer file: merge .* uses an id"):
        BPE.load(write("id.json", json.dumps(bad_id)))
    no_merges = {k: v for k, v in data.items() if k != "merges"}
    with pytest.raises(ValueError, match="damaged tokenizer file"):
        BPE.load(write("keys.json", json.dumps(no_merges)))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="not valid JSON"):
        BPE.load(tmp_path / "binary.json")
    with pytest.raises(FileNotFoundError, match="no such file"):
        BPE.load(tmp_path / "missing.json")


def test_train_from_files_and_gz(tmp_path):
    plain, packed = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    plain.write_text("\n".join(CORPUS[:9]) + "\n", encoding="utf-8")
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("\n".join(CORPUS[9:]) + "\n")
    from_files = BPE.train([plain, packed], 330)
    from_lines = BPE.train(CORPUS + ["\n"], 330)
    assert from_files.merges == from_lines.merges
    assert BPE.train(plain, 300).merges == BPE.train([plain], 300).merges  # one Path alone works too


# ---- bad input ----------------------------------------------------------------------------------

def test_errors_on_bad_input(tmp_path):
    with pytest.raises(ValueError, match="vocab_size 258 is too small: the 3 special tokens and 256 bytes"):
        BPE.train(CORPUS, 258)
    with pytest.raises(ValueError, match="vocab_size 259 is too small: the 4 special"):
        BPE.train(CORPUS, 259, special_tokens=["<mask>"])
    for empty in ([], [""], ["<s></s>"]):
        with pytest.raises(ValueError, match="the training corpus is empty"):
            BPE.train(empty, 300)
    with pytest.raises(FileNotFoundError, match="cannot read .*nope.txt: no such file"):
        BPE.train([tmp_path / "nope.txt"], 300)
    with pytest.raises(TypeError, match="not one string"):
        BPE.train("a line, not a list", 300)
    with pytest.raises(TypeError, match="not bytes"):
        BPE.train([b"bytes"], 300)
    bad = tmp_path / "bad.txt"
    bad.write_bytes("ok line\nzweite Zeile ä\n".encode() + b"third \xff line\n")
    with pytest.raises(ValueError, match=r"bad.txt: line 3 is not valid UTF-8"):
        BPE.train([bad], 300)
    with gzip.open(tmp_path / "bad.txt.gz", "wb") as f:
        f.write(b"\n" * 41 + b"\xc3(\n")
    with pytest.raises(ValueError, match=r"bad.txt.gz: line 42 is not valid UTF-8"):
        BPE.train([tmp_path / "bad.txt.gz"], 300)


def test_train_sizes_must_be_integers():
    # vocab_size 300.5 learned 42 merges (301 ids); 1e4 worked in train but not in train_naive; NaN meant 1.
    for vocab_size, min_frequency in ((300.5, 2), (1e4, 2), ("300", 2), (300, float("nan")), (300, None)):
        with pytest.raises(ValueError, match="(vocab_size|min_frequency) must be an integer"):
            BPE.train(CORPUS, vocab_size, min_frequency)


def test_special_tokens_one_str_refused():
    # It made each character a special token: "a" cut out of every training line, and encoded as one id.
    with pytest.raises(TypeError, match=r"special_tokens takes a list of strings, not one str: \['<mask>'\]"):
        BPE.train(CORPUS, 300, special_tokens="<mask>")


def test_pattern_that_drops_text_refused(tok):
    for pattern in (r"\w+", r"(\w+)|\s+|[^\w\s]+"):     # drops spaces; findall returns the group alone
        with pytest.raises(ValueError, match="does not cut every text into words"):
            BPE.train(CORPUS, 300, pattern=pattern)
    with pytest.raises(ValueError, match=r"the pattern .* drops characters of 'a \u2603 b'"):
        BPE(pattern=r"[^\u2603]+").encode("a \u2603 b")  # the probe misses it; encode does not
    with pytest.raises(ValueError, match=r"damaged tokenizer file: the pattern 'x\*' does not cut"):
        BPE.from_json(json.dumps({**json.loads(tok.to_json()), "pattern": "x*"}), "tok.json")


def test_lone_surrogates_named(tok):
    # UTF-8 cannot encode them (errors="surrogateescape" makes them): the text and the place are named.
    with pytest.raises(ValueError, match=r"encode: the text 'ok \\udcff' holds the lone surrogate .* at character 3"):
        tok.encode_batch(["fine", "ok \udcff"])
    for naive in (False, True):
        with pytest.raises(ValueError, match=r"the corpus word ' \\udcff' holds the lone surrogate"):
            BPE.train(["ok", "bad \udcff line"], 300, naive=naive)


def test_crlf_files_learn_what_lf_files_do(tmp_path):
    # read_lines drops "\r" when training reads a corpus; learning kept it (tokens " \r", "\r\n\r").
    lines = [line + " " * (k % 2) for k, line in enumerate(CORPUS)] + ["", ""]
    (tmp_path / "lf.txt").write_bytes("\n".join(lines).encode() + b"\n")
    (tmp_path / "crlf.txt").write_bytes("\r\n".join(lines).encode() + b"\r\n")
    lf, crlf = BPE.train([tmp_path / "lf.txt"], 400), BPE.train([tmp_path / "crlf.txt"], 400)
    assert crlf.merges == lf.merges and not any(b"\r" in t for t in crlf.vocab[crlf.offset + 256:])


def test_deeply_nested_json_refused():
    with pytest.raises(ValueError, match="not a tokenizer file: it is not valid JSON"):
        BPE.from_json("[" * 100_000 + "]" * 100_000)


def test_decode_errors(tok):
    with pytest.raises(ValueError, match="ids must lie in 0..399"):
        tok.decode([5, 400])
    with pytest.raises(ValueError, match="ids must lie in"):
        tok.decode([-1])
    for bad in ([100.0], [[100, 101]], 100, "hi"):
        with pytest.raises(TypeError, match="decode takes one sequence of integer ids"):
            tok.decode(bad)


def test_encode_takes_text(tok):
    with pytest.raises(TypeError, match=r"encode takes one str, got bytes \(decode bytes first"):
        tok.encode(b"hello")
    with pytest.raises(TypeError, match=r"encode takes one str, got list \(encode_batch"):
        tok.encode(["hello"])
    with pytest.raises(TypeError, match="encode_batch takes a list of texts, not one str"):
        tok.encode_batch("hello")                      # it encoded each character as a text of its own


def test_progress_bar(capsys):
    BPE.train(CORPUS, 300, progress=True)
    assert "bpe merges" in capsys.readouterr().err


# ---- command line -------------------------------------------------------------------------------

def parse(argv):
    parser = argparse.ArgumentParser(prog="minitransformer")
    bpe_command.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_in_process(tmp_path, capsys):
    corpus = tmp_path / "train.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write("\n".join(CORPUS) + "\n")
    out = tmp_path / "tok.json"
    args = parse(["bpe", "--input", str(corpus), "--vocab-size", "300", "--output", str(out), "--quiet"])
    assert args.func is bpe_command.run_bpe and bpe_command.run_bpe(args) == 0
    printed = capsys.readouterr().out
    assert "tokens per word" in printed and " s;" in printed
    assert BPE.load(out).merges == BPE.train([corpus], 300).merges


def test_cli_says_when_the_vocabulary_falls_short(tmp_path, capsys):
    # "learned 0 merges (vocab size 259)" for --vocab-size 300 gave no reason.
    (tmp_path / "a.txt").write_text("hello world\n", encoding="utf-8")
    for vocab_size, short in ((259, False), (300, True)):
        args = parse(["bpe", "--input", str(tmp_path / "a.txt"), "--vocab-size", str(vocab_size),
                      "--output", str(tmp_path / "tok.json"), "--quiet"])
        assert bpe_command.run_bpe(args) == 0
        printed = capsys.readouterr().out
        assert ("note: 259 of the 300 ids asked for: no pair occurs 2 or more times" in printed) == short, printed


def test_cli_errors(tmp_path, capsys):
    argv = ["bpe", "--input", str(tmp_path / "nope.txt"), "--vocab-size", "300",
            "--output", str(tmp_path / "tok.json"), "--quiet"]
    assert cli.main(argv) == 2                                 # a bad argument, found before any work
    assert "--input file not found" in capsys.readouterr().err and not (tmp_path / "tok.json").exists()


def test_cli_options_given_twice_add_up(tmp_path, capsys):
    # The second --input or --special-tokens replaced the first, silently.
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    args = parse(["bpe", "--input", str(tmp_path / "a.txt"), "--input", str(tmp_path / "b.txt"), "--vocab-size", "300",
                  "--output", str(tmp_path / "tok.json"), "--special-tokens", "<a>", "--special-tokens", "<b>", "--quiet"])
    assert args.input == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")] and args.special_tokens == ["<a>", "<b>"]
    assert bpe_command.run_bpe(args) == 0 and "from 2 file(s)" in capsys.readouterr().out
    assert BPE.load(tmp_path / "tok.json").special_tokens == ["<pad>", "<s>", "</s>", "<a>", "<b>"]


def test_cli_report_reads_lines_as_training_does(tmp_path, capsys):
    # A corpus with "\r\n" line ends reported a "\r" token a line more than the same corpus with "\n".
    reports = []
    for name, end in (("lf.txt", "\n"), ("crlf.txt", "\r\n")):
        (tmp_path / name).write_bytes((end.join(CORPUS) + end).encode())
        args = parse(["bpe", "--input", str(tmp_path / name), "--vocab-size", "300", "--output",
                      str(tmp_path / (name + ".json")), "--quiet"])
        assert bpe_command.run_bpe(args) == 0
        reports.append(capsys.readouterr().out.splitlines()[1])
    assert reports[0] == reports[1]


def test_cli_help(capsys):
    with pytest.raises(SystemExit):
        parse(["bpe", "--help"])
    assert "--vocab-size" in capsys.readouterr().out


def test_cli_subprocess(tmp_path):
    if not (ROOT / "minitransformer" / "__main__.py").exists():
        pytest.skip("minitransformer/__main__.py does not exist yet, so `python -m minitransformer` cannot run")
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = tmp_path / "tok.json"
    run = subprocess.run([sys.executable, "-m", "minitransformer", "bpe", "--input", str(corpus),
                          "--vocab-size", "300", "--output", str(out), "--quiet"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "tokens per word" in run.stdout and BPE.load(out).vocab_size == 300


# ---- hostile tokenizer files: validated before their bytes are joined or their pattern runs long -----

def tokenizer_file(path, merges, pattern=None):
    """A tokenizer file written by hand: merges as [left, right, text] (the text is checked last)."""
    from minitransformer.text.bpe import FORMAT, PATTERN, VERSION
    path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "pattern": pattern or PATTERN,
                                "special_tokens": ["<pad>", "<s>", "</s>"],
                                "merges": [[a, b, "x"] for a, b in merges]}), encoding="utf-8")
    return path


def test_merges_that_double_a_token_are_refused_before_their_bytes_are_joined(tmp_path):
    """36 merges of a token with itself fit in about 833 bytes and would spell a token of 64 GiB."""
    import tracemalloc
    from minitransformer.checks import FileError
    a = 3 + ord("a")
    path = tokenizer_file(tmp_path / "double.json", [(a, a)] + [(258 + k, 258 + k) for k in range(1, 36)])
    assert path.stat().st_size < 900
    tracemalloc.start()
    try:
        with pytest.raises(FileError, match=r"double\.json is a damaged tokenizer file: merge 12 \(270, 270\) makes a "
                                            r"token of 8,192 bytes, 16,382 in all: at most 4,096 and"):
            BPE.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak


def test_a_vocabulary_past_the_id_limit_is_refused_before_any_merge(tmp_path, monkeypatch):
    from minitransformer.text import bpe
    from minitransformer.checks import FileError
    with pytest.raises(ValueError, match=r"2,000,259 ids are too many: at most 1,114,112"):
        BPE(merges=[(259, 259)] * 2_000_000)                      # refused before the first merge is looked at
    monkeypatch.setattr(bpe, "MAX_VOCAB", 300)                    # the same check on a file, kept small
    path = tokenizer_file(tmp_path / "many.json", [(3 + ord("a"), 3 + ord("a"))] * 50)
    with pytest.raises(FileError, match=r"many\.json is a damaged tokenizer file: 309 ids are too many: at most 300"):
        BPE.load(path)


def test_a_pattern_that_backtracks_catastrophically_fails_in_one_sentence_never_hangs(tmp_path, monkeypatch):
    """A custom pattern runs under a time bound: at load on a probe string (runs of one character),
    and on every text it encodes; the project's own pattern runs without one."""
    from minitransformer.text import pretokenize
    from minitransformer.checks import FileError
    monkeypatch.setattr(pretokenize, "PATTERN_SECONDS", 0.05)
    path = tokenizer_file(tmp_path / "slow.json", [], pattern=r"(?:a|a)+$|[\s\S]")   # 2^48 ways on 48 a's
    with pytest.raises(FileError, match=r"slow\.json is a damaged tokenizer file: the pattern .* backtracks "
                                        r"catastrophically"):
        BPE.load(path)
    path = tokenizer_file(tmp_path / "later.json", [], pattern=r"(?:b|b)+$|[\s\S]")  # passes the probe
    tok = BPE.load(path)
    assert tok.decode(tok.encode("a b!")) == "a b!"
    with pytest.raises(TimeoutError, match=r"the pattern .* of .*later\.json backtracks catastrophically"):
        tok.encode("b" * 40 + "!")


# ---- applying merges: the heap against the plain loop, and its cost -----------------------------

@st.composite
def words_and_ranks(draw):
    """A word over 3 byte ids and up to 12 valid merges (each joins ids that exist before it)."""
    ids, ranks = [0, 1, 2], {}
    for _ in range(draw(st.integers(0, 12))):
        pair = (draw(st.sampled_from(ids)), draw(st.sampled_from(ids)))
        if pair not in ranks:
            ranks[pair] = len(ids)
            ids.append(len(ids))
    return draw(st.lists(st.integers(0, 2), max_size=40)), ranks


@given(words_and_ranks())
@settings(max_examples=300, deadline=None)
def test_heap_encoding_equals_the_plain_loop(case):
    word, ranks = case
    assert apply_merges(word, ranks) == apply_merges_naive(word, ranks)


def test_long_word_encodes_in_about_linear_time():
    """Encoding one word of 8n letters without a space takes about 8 times (times log 8n / log n) the
    CPU time of n letters, where the plain loop's grows with the number of merges that apply too (measured:
    100,000 letters and 1,500 merges took 10 s with it, 0.25 s with the heap). The bound 8 * sqrt(8) = 23
    is far below quadratic (64); best of 3 interleaved CPU-time runs, as in test_bpe_learn.py."""
    rng = random.Random(0)
    word = "".join(rng.choice("abcdefghij") for _ in range(200_000))
    ranks = {p: 256 + k for k, p in enumerate(learn_merges({word[:25_000]: 1}, 1500, 1, 0))}

    def cpu_seconds(n):
        start = time.process_time()
        apply_merges(list(word[:n].encode()), ranks)
        return time.process_time() - start
    small, large = zip(*((cpu_seconds(25_000), cpu_seconds(200_000)) for _ in range(3)))
    ratio = min(large) / min(small)
    assert ratio < 8 * 8 ** 0.5, f"8 times the letters took {ratio:.0f} times the CPU time: not linear"


# ---- patterns bounded before regex.compile, and timed per file, not per call ---------------------------

@pytest.mark.parametrize("pattern, message", [
    (r"a{2000000000}|[\s\S]", r"repeats too much: .*\{2000000000\}"),
    (r"(?:a{1000}){1000}{1000}|[\s\S]", r"repeats too much"),                  # nested: the product explodes
    (r"(?:(?:a{100}){100}){100}|[\s\S]", r"repeats too much"),
    (r"a{5,}|[\s\S]" + "|b" * 9000, r"has 18,\d+ characters, more than 4,096"),
    (r"x{99999999999999999999}|[\s\S]", r"repeats too much"),               # a count too long to read
    ("", r"the pre-tokenization pattern is empty"),
    (5, r"the pre-tokenization pattern must be a str"),
], ids=["2e9", "nested", "nested-three", "long", "huge-count", "empty", "not-a-str"])
def test_a_pattern_that_could_blow_up_is_refused_before_it_is_compiled(pattern, message, monkeypatch):
    """regex.compile expands counted repeats (a{2000000000} takes 2 GB in seconds): the bound is checked
    first, so here compiling is never reached."""
    from minitransformer.checks import SettingError
    from minitransformer.text import pretokenize
    compiled = []
    monkeypatch.setattr(pretokenize.regex, "compile", lambda *a, **k: compiled.append(a) or 1 / 0)
    with pytest.raises(SettingError, match=message):
        BPE(pattern=pattern)
    assert not compiled


def test_patterns_with_modest_repeats_are_kept():
    """GPT-4's pattern (one {1,3}) and dates ({4}, {2}, {2}) stay well under the bound."""
    gpt4 = (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    for pattern in (gpt4, r"\d{4}-\d{2}-\d{2}|[\s\S]"):
        tok = BPE(pattern=pattern)
        assert tok.decode(tok.encode("In 2024-01-31, 12345 cats.")) == "In 2024-01-31, 12345 cats."


def test_a_slow_pattern_spends_one_budget_per_file_not_one_per_call(tmp_path, monkeypatch):
    """(?:x|x)*y takes 2^n steps on n x's: each short line stays under a per-call bound, but 200 of them
    add up; encode_batch and a corpus file share one budget (PATTERN_SECONDS per 100,000 characters)."""
    from minitransformer.text import pretokenize
    monkeypatch.setattr(pretokenize, "PATTERN_SECONDS", 0.2)
    tok = BPE(pattern=r"(?:x|x)*y|[\s\S]")
    spent = []
    findall = tok._splitter.regex.findall

    def timed(text, timeout=None):
        spent.append(timeout)
        return findall(text, timeout=timeout)
    monkeypatch.setattr(tok._splitter, "regex", type("R", (), {"findall": staticmethod(timed)}))
    with pytest.raises(TimeoutError, match=r"backtracks catastrophically: it ran out of its time budget"):
        tok.encode_batch(["x" * 22] * 200)
    assert len(spent) < 200 and all(a >= b for a, b in zip(spent, spent[1:]))   # one budget, spent down
    (tmp_path / "x.txt").write_text(("x" * 22 + "\n") * 200)
    for corpus in ([tmp_path / "x.txt"], ["x" * 22] * 200):           # a file, and lines given as str
        with pytest.raises(TimeoutError, match=r"backtracks catastrophically"):
            tok.count_words(corpus)


def test_special_tokens_and_merges_of_a_file_are_bounded_and_typed(tmp_path):
    from minitransformer.checks import FileError
    with pytest.raises(ValueError, match=r"2,003 special tokens are too many: at most 1,024"):
        BPE(special_tokens=[f"<t{k}>" for k in range(2003)])
    with pytest.raises(ValueError, match=r"special tokens must be non-empty strings of at most 256 characters"):
        BPE(special_tokens=["<" + "x" * 300 + ">"])
    path = tmp_path / "obj.json"
    path.write_text(json.dumps({"format": "minitransformer-bpe", "version": 1, "pattern": BPE().pattern,
                                "special_tokens": ["<pad>", "<s>", "</s>"], "merges": [[100, 100.0, "aa"]]}))
    with pytest.raises(FileError, match=r"obj\.json is a damaged tokenizer file: merge 0 is \[100, 100\.0, 'aa'\]"):
        BPE.load(path)
    with pytest.raises(ValueError, match=r"merge 0 \(100, 100.0\) is not a pair of integer ids"):
        BPE([(100, 100.0)])


def test_a_corpus_of_too_many_distinct_words_is_refused_while_counting(tmp_path, monkeypatch):
    """The learner holds about 300 bytes a distinct word: past MAX_WORDS the corpus is refused, naming the
    file, before learning begins."""
    from minitransformer.text import bpe
    monkeypatch.setattr(bpe, "MAX_WORDS", 100)
    (tmp_path / "many.txt").write_text(" ".join(f"w{k:04d}x" for k in range(150)) + "\n")
    with pytest.raises(ValueError, match=r"the corpus holds more than 100 distinct words \(in .*many\.txt\)"):
        BPE.train([tmp_path / "many.txt"], 300)
    assert len(BPE.train([" ".join(f"w{k:04d}x" for k in range(90))], 300).merges) > 0
