"""Bad input on the command line, one table: every row runs `cli.main(argv)` in-process and checks the
exit code, that stderr is one line (no traceback) naming the argument, file or line (a regex), and that
no file that existed before was changed; a refused argument (exit 2) creates no file at all. Then
SIGTERM and Ctrl-C in a real `python -m minitransformer train`: a checkpoint, exit 143 or 130.

Row: (id, argv, stdin bytes or None, files to create in the working directory, exit code, regex).
"{D}" in argv stands for the module's directory of shared files: a tiny corpus (train.src/.tgt,
valid.src/.tgt), config.json (tiny, d_model 32, max_len 32: positions for 31 tokens and </s>), a
checkpoint trained 2 steps (model.npz, run/), its tokenizer (tok.json) and foreign ones (other_tok.json;
foreign_tok.json, of the same size).
A file entry's value is its bytes, READ_ONLY_DIR for an empty directory without write permission,
TO_DEV_NULL for a symbolic link to /dev/null (a device: replacing it would lose what is written there), or
TO_DEV_ZERO for one to /dev/zero (a device that never ends: reading it whole would take all memory).
Hostile inputs that would take gigabytes if their bound regressed are also run in a subprocess under
RLIMIT_AS (test_hostile_inputs_fail_within_a_memory_limit), so a regression fails instead of eating the machine.
"""
import contextlib
import errno
import gzip
import importlib.util
import io
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.run import checkpoint as ckpt
from minitransformer.run.rundir import list_checkpoints
from minitransformer import cli
from minitransformer.text.bpe import BPE

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["1 2", "3 , 4 5", "6 7 , 8", "9", "1 0 , 2", "3 4", "5 , 6 7", "8 9 , 1"]
TARGETS = ["twelve", "three , forty five", "sixty seven , eight", "nine", "ten , two", "thirty four",
           "five , sixty seven", "eighty nine , one"]
LONG = " ".join(["7"] * 60) + "\n"           # more tokens than the model's 31 positions
READ_ONLY_DIR = object()
TO_DEV_NULL = object()
TO_DEV_ZERO = object()
DEVICES = {id(TO_DEV_NULL): os.devnull, id(TO_DEV_ZERO): "/dev/zero"}
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root writes anywhere: no permission to test
NEEDS_USER = pytest.mark.skipif(AS_ROOT, reason="root may write in a directory without write permission")
NEEDS_NO_GPU = pytest.mark.skipif(backend.gpu_available(), reason="--device gpu works on this machine")
NEEDS_MATPLOTLIB = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="--attention is checked against matplotlib's formats")


def npy_bytes(array=np.zeros(3)):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def hostile_npz(members):
    """The bytes of an .npz holding a valid meta.json and the given members (name -> bytes)."""
    buffer, meta = io.BytesIO(), json.dumps({"format": ckpt.FORMAT, "version": ckpt.VERSION, "step": 1}).encode()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in {"meta.json.npy": npy_bytes(np.frombuffer(meta, np.uint8)), **members}.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def header_of(shape):
    """A .npy header declaring float32 values of `shape` (the data is up to the caller)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


LIAR_NPZ = hostile_npz({"model/w.npy": header_of((10 ** 10,)) + bytes(16)})   # declares 10^10 floats, holds 4
EXTRA_NPZ = hostile_npz({"model/w.npy": npy_bytes(np.ones(2, np.float32)), "payload.bin": bytes(100)})
DOUBLE_TOK = json.dumps({"format": "minitransformer-bpe", "version": 1, "pattern": BPE().pattern,  # 36 doublings
                         "special_tokens": ["<pad>", "<s>", "</s>"],
                         "merges": [[100, 100, "aa"]] + [[258 + k, 258 + k, "x"] for k in range(1, 36)]}).encode()

# a tokenizer of 1,000 ids, and a model config that fits 259 ids (the smallest vocabulary) but not 1,000
BIG_TOK = BPE([(3 + k // 256, 3 + k % 256) for k in range(1000 - 259)]).to_json().encode()
HUGE_CONFIG = json.dumps({"preset": "tiny", "d_model": 13300, "d_ff": 2, "n_heads": 2, "n_layers": 1, "max_len": 32,
                          "share_embeddings": False}).encode()
MB2_LINE = "".join(random.Random(0).choices("abcdefghij", k=2_000_000)).encode() + b"\n"  # one word


def tokenizer_json(pattern=None, specials=(), merges=()):
    """The bytes of a tokenizer file written by hand (no check of the code under test runs)."""
    return json.dumps({"format": "minitransformer-bpe", "version": 1, "pattern": pattern or BPE().pattern,
                       "special_tokens": ["<pad>", "<s>", "</s>", *specials], "merges": list(merges)}).encode()


def patched_directory(data, member, **fields):
    """The zip `data` with the central directory entry of `member` changed: compress_size, file_size (32-bit)
    or flag_bits, patched in place as a hostile file would carry them."""
    data = bytearray(data)
    name = member.encode()
    at = data.find(b"PK\x01\x02")
    while at >= 0 and data[at + 46:at + 46 + len(name)] != name:
        at = data.find(b"PK\x01\x02", at + 4)
    offsets = {"flag_bits": (8, "<H"), "compress_size": (20, "<I"), "file_size": (24, "<I")}
    for key, value in fields.items():
        offset, fmt = offsets[key]
        data[at + offset:at + offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return bytes(data)


def cut_header(keep=None):
    """A .npy member whose header is cut inside its dict (keep bytes of it), or zeroed (keep None)."""
    full = header_of((2,)) + bytes(8)
    if keep is None:
        return full[:10] + bytes(len(full) - 10)
    return full[:10 + keep]


def meta_bomb(items):
    """An .npz whose deflated meta.json holds `items` empty objects ([{},{},...]: 24 times its bytes as
    Python objects), a few hundred KB on disk."""
    text = json.dumps({"format": ckpt.FORMAT, "version": ckpt.VERSION, "step": 1})[:-1] + ', "x": ['
    text = (text + "{}," * items + "{}]}").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("meta.json.npy", npy_bytes(np.frombuffer(text, np.uint8)))
    return buffer.getvalue()


SMALL_W = {"model/w.npy": npy_bytes(np.ones(2, np.float32))}
LYING_NPZ = patched_directory(hostile_npz(SMALL_W), "model/w.npy", compress_size=3 << 20, file_size=3 << 30)
BOMB_CLAIM_NPZ = patched_directory(hostile_npz(SMALL_W), "model/w.npy", file_size=(1 << 30) + 88)
ENCRYPTED_NPZ = patched_directory(hostile_npz(SMALL_W), "model/w.npy", flag_bits=1)
CUT_HEADER_NPZ = hostile_npz({"model/w.npy": cut_header(keep=30)})
ZEROED_HEADER_NPZ = hostile_npz({"model/w.npy": cut_header()})
SLOW_PATTERN = r"(?:x|x)*y|[\s\S]"                  # 2^n ways on n x's; passes the load-time probe
X_LINES = b"x" * 20 + b"\n"
ZEROS_GZ = gzip.compress(bytes(6 << 20), 1)         # one 6 MiB line of NUL bytes: over the line limit


def train(*extra, drop=()):
    """A train command that would run (tiny config, the shared tokenizer), with `extra` options
    after it (argparse: the last value wins) and the options in `drop` removed with their value."""
    argv = ["train", "--config", "{D}/config.json", "--train-src", "{D}/train.src", "--train-tgt", "{D}/train.tgt",
            "--tokenizer", "{D}/tok.json", "--out", "out", "--steps", "2", "--max-tokens", "200", "--warmup", "2",
            "--save-every", "0", "--eval-every", "0", "--no-progress"]
    for option in drop:
        i = argv.index(option)
        del argv[i:i + 2]
    return argv + list(extra)


VALID = ("--valid-src", "{D}/valid.src", "--valid-tgt", "{D}/valid.tgt")
TRANSLATE = ["translate", "--checkpoint", "{D}/model.npz", "--input", "in.txt", "--output", "out.txt"]
OLD = {"in.txt": b"1 2\n3 4\n", "out.txt": b"an earlier translation\n"}   # out.txt must survive every row
BPE_OWN = ["bpe", "--output", "tok.json", "--quiet"]   # rows give --input (given twice, both count)
BPE_ARGS = BPE_OWN + ["--input", "{D}/train.src"]
OLD_TOK = {"tok.json": b"an earlier tokenizer\n"}
AVERAGE = ["average", "{D}/run", "--output", "avg.npz"]
OLD_AVG = {"avg.npz": b"an earlier average\n"}

ROWS = [
    # ---- train: every setting is checked before the corpus is read (exit 2, nothing written)
    ("train-lr-scale-negative", train("--lr-scale", "-1"), None, {}, 2,
     r"--lr-scale must be a finite number in \(0\.0, inf\), got -1\.0"),
    ("train-lr-scale-zero", train("--lr-scale", "0"), None, {}, 2, r"--lr-scale must be .*got 0\.0"),
    ("train-clip-norm-negative", train("--clip-norm", "-1"), None, {}, 2, r"--clip-norm must be .*got -1\.0"),
    ("train-clip-norm-zero", train("--clip-norm", "0"), None, {}, 2, r"--clip-norm must be .*got 0\.0"),
    ("train-clip-norm-nan", train("--clip-norm", "nan"), None, {}, 2, r"--clip-norm must be a finite .*got nan"),
    ("train-steps-zero", train("--steps", "0"), None, {}, 2, r"--steps must be an integer of at least 1, got 0"),
    ("train-steps-negative", train("--steps", "-3"), None, {}, 2, r"--steps must be .*got -3"),
    ("train-epochs-zero", train("--epochs", "0", drop=["--steps"]), None, {}, 2, r"--epochs must be .*got 0\.0"),
    ("train-epochs-negative", train("--epochs", "-1", drop=["--steps"]), None, {}, 2, r"--epochs must be .*got -1\.0"),
    ("train-epochs-inf", train("--epochs", "inf", drop=["--steps"]), None, {}, 2,
     r"--epochs must be a finite .*got inf"),
    ("train-epochs-nan", train("--epochs", "nan", drop=["--steps"]), None, {}, 2,
     r"--epochs must be a finite .*got nan"),
    ("train-steps-and-epochs", train("--epochs", "1"), None, {}, 2, r"give either --steps or --epochs"),
    ("train-eval-sentences-negative", train(*VALID, "--eval-sentences", "-1"), None, {}, 2,
     r"--eval-sentences must be an integer of at least 1, got -1"),
    ("train-eval-sentences-without-valid", train("--eval-sentences", "5"), None, {}, 2,
     r"--eval-sentences needs validation files"),
    ("train-beam-zero", train(*VALID, "--beam", "0"), None, {}, 2, r"--beam must be an integer of at least 1, got 0"),
    ("train-max-tokens-zero", train("--max-tokens", "0"), None, {}, 2, r"--max-tokens must be .*got 0"),
    ("train-accum-zero", train("--accum", "0"), None, {}, 2, r"--accum must be .*got 0"),
    ("train-ranks-zero", train("--ranks", "0"), None, {}, 2, r"--ranks must be an integer of at least 1, got 0"),
    ("train-ranks-more-than-tokens", train("--ranks", "300"), None, {}, 2,
     r"--max-tokens 200 cannot be split among --ranks 300"),
    ("train-ranks-on-the-gpu", train("--ranks", "2", "--device", "gpu"), None, {}, 2,
     r"--ranks 2 starts threads that share the CPU's cores: for GPUs, or under mpiexec, leave it out"),
    ("train-cuda-graphs-on-the-cpu", train("--cuda-graphs"), None, {}, 2, r"--cuda-graphs replays CUDA graphs: give --device gpu"),
    ("train-cuda-graphs-accum", train("--cuda-graphs", "--device", "gpu", "--accum", "2"), None, {}, 2,
     r"--cuda-graphs replays one batch per update without clipping: give --accum=1 and no --clip-norm, got --accum=2"),
    ("train-warmup-zero", train("--warmup", "0"), None, {}, 2, r"--warmup must be .*got 0"),
    ("train-keep-zero", train("--keep", "0"), None, {}, 2, r"--keep must be .*got 0"),
    ("train-save-every-negative", train("--save-every", "-1"), None, {}, 2, r"--save-every must be .*got -1"),
    ("train-seed-negative", train("--seed", "-1"), None, {}, 2, r"--seed must be .*got -1"),
    ("train-max-len-zero", train("--max-len", "0"), None, {}, 2, r"--max-len must be between 1 and 31 .*got 0"),
    ("train-max-len-negative", train("--max-len", "-4"), None, {}, 2, r"--max-len must be between 1 and 31 .*got -4"),
    ("train-max-len-over-positions", train("--max-len", "40"), None, {}, 2,
     r"--max-len must be between 1 and 31 \(the model's max_len 32 .*got 40"),
    ("train-vocab-size-huge", train("--vocab-size", "2000000", drop=["--tokenizer"]), None, {}, 2,
     r"--vocab-size must be between 259 .* got 2,000,000"),
    ("train-vocab-size-too-small", train("--vocab-size", "100", drop=["--tokenizer"]), None, {}, 2,
     r"--vocab-size must be between 259 .* got 100"),
    ("train-tokenizer-and-vocab-size", train("--vocab-size", "300"), None, {}, 2, r"--tokenizer FILE or --vocab-size"),
    ("train-valid-src-alone", train("--valid-src", "{D}/valid.src"), None, {}, 2, r"--valid-src and --valid-tgt"),
    ("train-train-src-missing", train("--train-src", "nope.src"), None, {}, 2,
     r"--train-src file not found: nope\.src"),
    ("train-resume-missing", train("--resume", "nope.npz"), None, {}, 2, r"--resume checkpoint not found: nope\.npz"),
    ("train-config-bad-name", train("--config", "huge"), None, {}, 2, r"--config must be one of tiny, small"),
    ("train-config-null", train("--config", "bad.json"), None,
     {"bad.json": b'{"preset": "tiny", "dropout": null}'}, 2,
     r"config file bad\.json: dropout must be a finite number .*got None"),
    ("train-config-string-for-number", train("--config", "bad.json"), None,
     {"bad.json": b'{"preset": "tiny", "d_model": "32"}'}, 2,
     r"config file bad\.json: d_model must be an integer .*got '32'"),
    ("train-config-float-for-int", train("--config", "bad.json"), None,
     {"bad.json": b'{"preset": "tiny", "n_layers": 1.5}'}, 2,
     r"config file bad\.json: n_encoder_layers must be an integer"),
    ("train-config-not-json", train("--config", "bad.json"), None, {"bad.json": b"{d_model: 32"}, 2,
     r"config file bad\.json is not valid JSON"),
    ("train-config-not-an-object", train("--config", "bad.json"), None, {"bad.json": b"[32]"}, 2,
     r"config file bad\.json must hold a JSON object"),
    ("train-config-unknown-field", train("--config", "bad.json"), None, {"bad.json": b'{"d_modle": 32}'}, 2,
     r"config file bad\.json: unknown fields d_modle"),
    ("train-config-unknown-preset", train("--config", "bad.json"), None, {"bad.json": b'{"preset": 5}'}, 2,
     r"config file bad\.json: preset must be one of"),
    ("train-config-vocab-size", train("--config", "bad.json"), None, {"bad.json": b'{"vocab_size": 500}'}, 2,
     r"config file bad\.json sets vocab_size"),
    ("train-config-max-len-zero", train("--config", "bad.json"), None, {"bad.json": b'{"max_len": 0}'}, 2,
     r"config file bad\.json: max_len must be an integer of at least 1, got 0"),
    ("train-config-pad-id", train("--config", "bad.json"), None, {"bad.json": b'{"pad_id": 5}'}, 2,
     r"config file bad\.json: pad_id, bos_id, eos_id must be the tokenizer's 0, 1, 2"),
    ("train-out-is-a-file", train("--out", "taken"), None, {"taken": b"a file\n"}, 2, r"--out taken is a file"),
    ("train-out-under-a-file", train("--out", "taken/run"), None, {"taken": b"a file\n"}, 2,
     r"--out taken/run cannot be written: .*taken is a file"),
    ("train-out-holds-an-earlier-run", train("--out", "{D}/run"), None, {}, 2,
     r"--out .*run already holds checkpoint_0000002\.npz of an earlier run: continue that run \(--resume auto\)"),
    pytest.param("train-out-no-permission", train("--out", "locked/run"), None, {"locked": READ_ONLY_DIR}, 2,
                 r"--out locked/run cannot be written: no permission to write in .*locked", marks=NEEDS_USER),
    # ---- train: the files (exit 1), before the model is built
    ("train-empty-corpus-with-tokenizer", train("--train-src", "e.src", "--train-tgt", "e.tgt"), None,
     {"e.src": b"", "e.tgt": b""}, 1, r"no sentence pairs to train on: e\.src and e\.tgt hold no line pair"),
    ("train-whitespace-corpus-with-tokenizer", train("--train-src", "e.src", "--train-tgt", "e.tgt"), None,
     {"e.src": b"  \n\t\n", "e.tgt": b" \n \n"}, 1, r"no sentence pairs to train on: e\.src and e\.tgt"),
    ("train-empty-corpus-learning-bpe",
     train("--train-src", "e.src", "--train-tgt", "e.tgt", "--vocab-size", "300", drop=["--tokenizer"]), None,
     {"e.src": b"\n", "e.tgt": b"\n"}, 1, r"no sentence pairs to train on: e\.src and e\.tgt"),
    ("train-every-pair-too-long", train("--max-len", "2", "--train-src", "a.src", "--train-tgt", "a.tgt"), None,
     {"a.src": b"1 2 3 4\n5 6 7 8\n", "a.tgt": b"one two three four\nfive six seven eight\n"}, 1,
     r"no sentence pairs to train on in a\.src and a\.tgt: kept 0 of 2 pairs \(0 empty, 2 longer than 2 tokens\)"),
    ("train-valid-line-too-long", train("--valid-src", "v.src", "--valid-tgt", "v.tgt"), None,
     {"v.src": b"1 2\n" + LONG.encode(), "v.tgt": b"twelve\nseven\n"}, 1,
     r"v\.src: line 2 has \d+ tokens, but the model's positions hold at most 31"),
    ("train-valid-empty", train("--valid-src", "v.src", "--valid-tgt", "v.tgt"), None,
     {"v.src": b"", "v.tgt": b""}, 1, r"v\.src and v\.tgt are empty"),
    ("train-valid-blank-lines", train("--valid-src", "v.src", "--valid-tgt", "v.tgt"), None,
     {"v.src": b"\n \n", "v.tgt": b"\n\n"}, 1,
     r"no sentence pairs to evaluate on: v\.src and v\.tgt hold no line pair with both sides non-empty"),
    ("train-parallel-lengths-differ", train("--train-tgt", "short.tgt"), None, {"short.tgt": b"one\n"}, 1,
     r"train\.src has 8 lines but short\.tgt has 1"),
    ("train-train-src-invalid-utf8", train("--train-src", "bad.src", "--train-tgt", "bad.tgt"), None,
     {"bad.src": b"1 2\n3 \xff 4\n", "bad.tgt": b"twelve\nthree\n"}, 1, r"bad\.src: line 2 is not valid UTF-8"),
    ("train-tokenizer-damaged", train("--tokenizer", "bad_tok.json"), None, {"bad_tok.json": b"not json"}, 1,
     r"bad_tok\.json is not a tokenizer file"),
    # ---- translate: settings before the model is loaded; lines before decoding; --output never touched
    ("translate-max-len-a-nan", TRANSLATE + ["--max-len-a", "nan"], None, OLD, 2,
     r"--max-len-a must be a finite number .*got nan"),
    ("translate-max-len-a-zero-b-negative", TRANSLATE + ["--max-len-a", "0", "--max-len-b", "-1"], None, OLD, 2,
     r"--max-len-b must be an integer of at least 0, got -1"),
    ("translate-max-len-both-zero", TRANSLATE + ["--max-len-a", "0", "--max-len-b", "0"], None, OLD, 2,
     r"--max-len-a and --max-len-b are both 0"),
    ("translate-max-len-a-negative", TRANSLATE + ["--max-len-a", "-1"], None, OLD, 2,
     r"--max-len-a must be .*got -1\.0"),
    ("translate-batch-size-zero", TRANSLATE + ["--batch-size", "0"], None, OLD, 2,
     r"--batch-size must be an integer of at least 1, got 0"),
    ("translate-batch-size-negative", TRANSLATE + ["--batch-size", "-1"], None, OLD, 2,
     r"--batch-size must be .*got -1"),
    ("translate-beam-zero", TRANSLATE + ["--beam", "0"], None, OLD, 2,
     r"--beam must be an integer of at least 1, got 0"),
    ("translate-nbest-over-beam", TRANSLATE + ["--beam", "2", "--nbest", "3"], None, OLD, 2,
     r"--nbest \(3\) cannot exceed --beam \(2\)"),
    ("translate-alpha-negative", TRANSLATE + ["--alpha", "-0.5"], None, OLD, 2, r"--alpha must be .*got -0\.5"),
    ("translate-alpha-inf", TRANSLATE + ["--alpha", "inf"], None, OLD, 2, r"--alpha must be a finite .*got inf"),
    ("translate-alpha-huge", TRANSLATE + ["--alpha", "1e308"], None, OLD, 2,
     r"--alpha must be a finite number in \[0\.0, 10\.0\], got 1e\+308"),
    ("translate-max-len-a-huge", TRANSLATE + ["--max-len-a", "1e30"], None, OLD, 2,
     r"--max-len-a must be a finite number in \[0\.0, 1000\.0\], got 1e\+30"),
    ("translate-max-len-b-huge", TRANSLATE + ["--max-len-b", "10000000000000000000"], None, OLD, 2,
     r"--max-len-b must be at most 1,000,000, got 10000000000000000000"),
    ("translate-line-too-long-file", TRANSLATE, None, {**OLD, "in.txt": b"1 2\n" + LONG.encode()}, 1,
     r"in\.txt: line 2 has \d+ tokens, but the model's positions hold at most 31"),
    ("translate-line-too-long-stdin", TRANSLATE + ["--input", "-"], b"1 2\n3\n" + LONG.encode(), OLD, 1,
     r"stdin: line 3 has \d+ tokens"),
    ("translate-stdin-invalid-utf8", TRANSLATE + ["--input", "-"], b"1 2\n3 4\n5 \xff 6\n", OLD, 1,
     r"stdin: line 3 is not valid UTF-8 \(invalid start byte at byte 3 of the line\)"),
    ("translate-input-invalid-utf8", TRANSLATE, None, {**OLD, "in.txt": b"\xc3\n"}, 1,
     r"in\.txt: line 1 is not valid UTF-8"),
    ("translate-npy-renamed-npz", TRANSLATE + ["--checkpoint", "fake.npz"], None, {**OLD, "fake.npz": npy_bytes()}, 1,
     r"fake\.npz holds a single array \(\.npy\), not a checkpoint"),
    ("translate-checkpoint-garbage", TRANSLATE + ["--checkpoint", "bad.npz"], None, {**OLD, "bad.npz": b"garbage"}, 1,
     r"bad\.npz is not a readable checkpoint"),
    ("translate-checkpoint-missing", TRANSLATE + ["--checkpoint", "nope.npz"], None, OLD, 2,
     r"--checkpoint file not found: nope\.npz"),
    ("translate-input-missing", TRANSLATE + ["--input", "nope.txt"], None, OLD, 2,
     r"--input file not found: nope\.txt"),
    ("translate-tokenizer-of-another-model", TRANSLATE + ["--tokenizer", "{D}/other_tok.json"], None, OLD, 1,
     r"other_tok\.json has \d+ ids but the model in .*model\.npz was built for"),
    ("translate-output-under-a-file", TRANSLATE + ["--output", "taken/out.txt"], None, {**OLD, "taken": b"x"}, 2,
     r"--output taken/out\.txt cannot be written: .*taken is a file"),
    ("translate-output-is-a-directory", TRANSLATE + ["--output", "somedir"], None, {**OLD, "somedir/keep": b""}, 2,
     r"--output somedir is a directory"),
    pytest.param("translate-output-no-permission", TRANSLATE + ["--output", "locked/out.txt"], None,
                 {**OLD, "locked": READ_ONLY_DIR}, 2, r"--output locked/out\.txt cannot be written: no permission",
                 marks=NEEDS_USER),
    ("translate-attention-under-a-file", TRANSLATE + ["--attention", "taken/a.png"], None, {**OLD, "taken": b"x"}, 2,
     r"--attention taken/a\.png cannot be written"),
    ("translate-output-is-the-input", TRANSLATE + ["--output", "in.txt"], None, OLD, 2,
     r"--output in\.txt is also the --input file in\.txt; writing it would destroy that file"),
    ("translate-output-is-the-checkpoint", TRANSLATE + ["--checkpoint", "m.npz", "--output", "./m.npz"], None,
     {**OLD, "m.npz": b"a checkpoint"}, 2, r"--output \./m\.npz is also the --checkpoint file m\.npz"),
    ("translate-output-is-the-tokenizer", TRANSLATE + ["--tokenizer", "t.json", "--output", "t.json"], None,
     {**OLD, "t.json": b"a tokenizer"}, 2, r"--output t\.json is also the --tokenizer file t\.json"),
    ("translate-output-is-a-device", TRANSLATE + ["--output", "null"], None, {**OLD, "null": TO_DEV_NULL}, 2,
     r"--output null is not a regular file \(a device or a pipe\)"),
    ("translate-attention-is-the-output", TRANSLATE + ["--attention", "out.txt"], None, OLD, 2,
     r"--attention out\.txt is also the --output file out\.txt"),
    pytest.param("translate-attention-unknown-format", TRANSLATE + ["--attention", "a.txt"], None, OLD, 2,
                 r"--attention a\.txt must end in a format matplotlib writes: .*\.png", marks=NEEDS_MATPLOTLIB),
    pytest.param("translate-attention-no-extension", TRANSLATE + ["--attention", "attn"], None, OLD, 2,
                 r"--attention attn must end in a format matplotlib writes", marks=NEEDS_MATPLOTLIB),
    pytest.param("translate-attention-empty-input", TRANSLATE + ["--attention", "a.png"], None,
                 {**OLD, "in.txt": b""}, 1, r"--attention: in\.txt holds no line to draw", marks=NEEDS_MATPLOTLIB),
    # ---- bpe: every option before reading; --output before learning
    ("bpe-vocab-size-huge", BPE_ARGS + ["--vocab-size", "2000000"], None, OLD_TOK, 2,
     r"--vocab-size must be between 259 .* and 1,114,112, got 2,000,000"),
    ("bpe-vocab-size-too-small", BPE_ARGS + ["--vocab-size", "200"], None, OLD_TOK, 2,
     r"--vocab-size must be between 259 .*got 200"),
    ("bpe-vocab-size-too-small-for-specials", BPE_ARGS + ["--vocab-size", "259", "--special-tokens", "<m>"], None,
     OLD_TOK, 2, r"--vocab-size must be between 260 .*got 259"),
    ("bpe-special-tokens-repeated", BPE_ARGS + ["--vocab-size", "300", "--special-tokens", "<m>", "<m>"], None,
     OLD_TOK, 2, r"--special-tokens: special tokens are repeated"),
    ("bpe-special-tokens-repeated-in-two-options",
     BPE_ARGS + ["--vocab-size", "300", "--special-tokens", "<m>", "--special-tokens", "<m>"], None, OLD_TOK, 2,
     r"--special-tokens: special tokens are repeated"),
    ("bpe-special-tokens-empty", BPE_ARGS + ["--vocab-size", "300", "--special-tokens", ""], None, OLD_TOK, 2,
     r"--special-tokens: special tokens must be non-empty strings"),
    ("bpe-special-tokens-blank", BPE_ARGS + ["--vocab-size", "300", "--special-tokens", " "], None, OLD_TOK, 2,
     r"--special-tokens: special tokens must be non-empty strings"),
    ("bpe-min-frequency-zero", BPE_ARGS + ["--vocab-size", "300", "--min-frequency", "0"], None, OLD_TOK, 2,
     r"--min-frequency must be at least 1, got 0"),
    ("bpe-output-under-a-file", BPE_ARGS + ["--vocab-size", "300", "--output", "taken/tok.json"], None,
     {"taken": b"x"}, 2, r"--output taken/tok\.json cannot be written: .*taken is a file, not a directory"),
    ("bpe-output-is-a-directory", BPE_ARGS + ["--vocab-size", "300", "--output", "somedir"], None,
     {"somedir/keep": b""}, 2, r"--output somedir is a directory"),
    pytest.param("bpe-output-no-permission", BPE_ARGS + ["--vocab-size", "300", "--output", "locked/tok.json"], None,
                 {"locked": READ_ONLY_DIR}, 2, r"--output locked/tok\.json cannot be written: no permission",
                 marks=NEEDS_USER),
    ("bpe-output-is-the-input", BPE_OWN + ["--vocab-size", "300", "--input", "c.txt", "--output", "c.txt"], None,
     {"c.txt": b"a b\n"}, 2, r"--output c\.txt is also the --input file c\.txt"),
    ("bpe-output-stdout", BPE_ARGS + ["--vocab-size", "300", "--output", "-"], None, OLD_TOK, 2,
     r"--output takes a file name, not stdout \('-'\)"),
    ("bpe-input-stdin", BPE_OWN + ["--vocab-size", "300", "--input", "-"], b"a b\n", OLD_TOK, 2,
     r"--input takes files, not stdin"),
    ("bpe-input-missing", BPE_OWN + ["--vocab-size", "300", "--input", "nope.txt"], None, OLD_TOK, 2,
     r"--input file not found: nope\.txt"),
    ("bpe-input-is-a-directory", BPE_OWN + ["--vocab-size", "300", "--input", "somedir"], None,
     {**OLD_TOK, "somedir/keep": b""}, 2, r"--input file somedir is a directory"),
    ("bpe-empty-corpus", BPE_OWN + ["--vocab-size", "300", "--input", "e.txt"], None, {**OLD_TOK, "e.txt": b""}, 1,
     r"the training corpus is empty: e\.txt holds no text to learn merges from"),
    ("bpe-empty-corpus-two-files", BPE_OWN + ["--vocab-size", "300", "--input", "e.txt", "f.txt"], None,
     {**OLD_TOK, "e.txt": b"", "f.txt": b"<pad>"}, 1, r"the training corpus is empty: e\.txt, f\.txt hold no text"),
    ("bpe-blank-corpus", BPE_OWN + ["--vocab-size", "300", "--input", "b.txt"], None,
     {**OLD_TOK, "b.txt": b"\n  \n\t\n"}, 1, r"the training corpus is empty: b\.txt holds no text"),
    ("bpe-input-invalid-utf8", BPE_OWN + ["--vocab-size", "300", "--input", "bad.txt"], None,
     {**OLD_TOK, "bad.txt": b"good\nb\xe4d\n"}, 1, r"bad\.txt: line 2 is not valid UTF-8"),
    # ---- untrusted files and sizes: validated before anything is allocated, sizes bounded with a reason
    ("train-config-d-model-huge", train("--config", "big.json"), None, {"big.json": b'{"preset": "tiny", '
     b'"d_model": 1000000}'}, 2, r"config file big\.json: the model would hold [\d,]+ floats .*over the limit of 2,147,"),
    ("train-config-layers-huge", train("--config", "big.json"), None, {"big.json": b'{"n_layers": 200000}'}, 2,
     r"config file big\.json: n_encoder_layers must be at most 1,024, got 200,000: deeper than any Transformer"),
    ("train-beam-huge", train(*VALID, "--beam", "100000"), None, {}, 2,
     r"--beam must be at most 256, got 100,000: beam search scores --beam x vocabulary candidates"),
    ("translate-beam-huge", TRANSLATE + ["--beam", "100000"], None, OLD, 2, r"--beam must be at most 256, got 100,000"),
    ("translate-checkpoint-header-lies", TRANSLATE + ["--checkpoint", "liar.npz"], None, {**OLD, "liar.npz": LIAR_NPZ},
     1, r"liar\.npz: model/w declares \(10000000000,\) float32 values \(40,000,000,000 bytes\) but holds 16 bytes"),
    ("translate-checkpoint-extra-member", TRANSLATE + ["--checkpoint", "x.npz"], None, {**OLD, "x.npz": EXTRA_NPZ}, 1,
     r"x\.npz is not a minitransformer checkpoint: it holds 'payload\.bin', which no checkpoint holds"),
    ("average-checkpoint-header-lies", ["average", "{D}/model.npz", "liar.npz", "--output", "avg.npz"], None,
     {**OLD_AVG, "liar.npz": LIAR_NPZ}, 1, r"liar\.npz: model/w declares \(10000000000,\) float32 values"),
    ("translate-tokenizer-doubling-merges", TRANSLATE + ["--tokenizer", "double.json"], None,
     {**OLD, "double.json": DOUBLE_TOK}, 1,
     r"double\.json is a damaged tokenizer file: merge 12 \(270, 270\) makes a token of 8,192 bytes"),
    ("translate-tokenizer-foreign-same-size", TRANSLATE + ["--tokenizer", "{D}/foreign_tok.json"], None, OLD, 1,
     r"foreign_tok\.json is not the tokenizer .*model\.npz was trained with: they differ in their pattern"),
    # ---- bleu
    ("bleu-two-empty-files", ["bleu", "h.txt", "r.txt"], None, {"h.txt": b"", "r.txt": b""}, 2,
     r"hypothesis file h\.txt is empty"),
    ("bleu-empty-stdin", ["bleu", "-", "r.txt"], b"", {"r.txt": b"a\n"}, 2, r"hypothesis file stdin is empty"),
    ("bleu-stdin-invalid-utf8", ["bleu", "-", "r.txt"], b"a b\nc d\ne \xff\n", {"r.txt": b"a b\nc d\ne f\n"}, 1,
     r"stdin: line 3 is not valid UTF-8"),
    ("bleu-reference-invalid-utf8", ["bleu", "h.txt", "r.txt"], None, {"h.txt": b"a\n", "r.txt": b"\xff\n"}, 1,
     r"r\.txt: line 1 is not valid UTF-8"),
    ("bleu-lengths-differ", ["bleu", "h.txt", "r.txt"], None, {"h.txt": b"a\nb\n", "r.txt": b"a\n"}, 2,
     r"reference file r\.txt has 1 lines but the hypotheses have 2"),
    ("bleu-stdin-twice", ["bleu", "-", "-"], b"a\n", {}, 2, r"stdin \('-'\) can be read once"),
    ("bleu-reference-missing", ["bleu", "h.txt", "nope.txt"], None, {"h.txt": b"a\n"}, 2,
     r"reference file not found: nope\.txt"),
    ("bleu-reference-is-the-hypothesis-file", ["bleu", "h.txt", "./h.txt"], None, {"h.txt": b"a\n"}, 2,
     r"reference file \./h\.txt is the hypothesis file h\.txt: its BLEU would be 100"),
    ("bleu-reference-twice", ["bleu", "h.txt", "r.txt", "r.txt"], None, {"h.txt": b"a\n", "r.txt": b"b\n"}, 2,
     r"reference file r\.txt is given twice; it would count as two references"),
    # ---- average
    ("average-last-zero", AVERAGE + ["--last", "0"], None, OLD_AVG, 2, r"--last must be at least 1, got 0"),
    ("average-last-negative", AVERAGE + ["--last", "-1"], None, OLD_AVG, 2, r"--last must be at least 1, got -1"),
    ("average-last-more-than-there-are", AVERAGE + ["--last", "5"], None, OLD_AVG, 2,
     r"--last 5 asks for more checkpoints than .*run holds \(1\)"),
    ("average-last-with-files", ["average", "{D}/model.npz", "--last", "1", "--output", "avg.npz"], None, OLD_AVG, 2,
     r"--last goes with a directory"),
    ("average-directory-without-checkpoints", ["average", "somedir", "--output", "avg.npz"], None,
     {**OLD_AVG, "somedir/keep": b""}, 2, r"no checkpoint_\*\.npz files in somedir"),
    ("average-npy-renamed-npz", ["average", "{D}/model.npz", "fake.npz", "--output", "avg.npz"], None,
     {**OLD_AVG, "fake.npz": npy_bytes()}, 1, r"fake\.npz holds a single array \(\.npy\)"),
    ("average-checkpoint-missing", ["average", "nope.npz", "--output", "avg.npz"], None, OLD_AVG, 2,
     r"checkpoint not found: nope\.npz"),
    ("average-output-is-an-input", ["average", "{D}/model.npz", "a.npz", "--output", "a.npz"], None,
     {**OLD_AVG, "a.npz": b"x"}, 2, r"--output a\.npz is also the checkpoint to average a\.npz"),
    ("average-checkpoint-twice", ["average", "{D}/model.npz", "{D}/../{D_NAME}/model.npz", "--output", "avg.npz"],
     None, OLD_AVG, 2, r"checkpoint .*model\.npz is given twice; it would weigh twice in the average"),
    ("average-a-copy-and-its-step-checkpoint", ["average", "{D}/model.npz", "{D}/run/checkpoint_0000002.npz",
                                                "--output", "avg.npz"], None, OLD_AVG, 1,
     r"checkpoint_0000002\.npz and .*model\.npz both hold step 2: the same checkpoint twice"),
    ("average-output-named-like-a-checkpoint", AVERAGE + ["--output", "checkpoint_best.npz"], None,
     {"checkpoint_best.npz": b"the best of a run\n"}, 2,
     r"--output checkpoint_best\.npz is named like a training run's checkpoint: it would replace or pass for one"),
    ("average-output-stdout", AVERAGE + ["--output", "-"], None, OLD_AVG, 2,
     r"--output takes a file name, not stdout \('-'\)"),
    ("average-output-under-a-file", AVERAGE + ["--output", "taken/avg.npz"], None, {"taken": b"x"}, 2,
     r"--output taken/avg\.npz cannot be written: .*taken is a file"),
    # ---- demo
    ("demo-steps-zero", ["demo", "--steps", "0"], None, {}, 2, r"--steps must be at least 1, got 0"),
    ("demo-seed-negative", ["demo", "--seed", "-1"], None, {}, 2, r"--seed must be at least 0, got -1"),
    ("demo-out-is-a-file", ["demo", "--quick", "--out", "taken"], None, {"taken": b"x"}, 2, r"--out taken is a file"),
    pytest.param("demo-device-gpu-without-one", ["demo", "--quick", "--device", "gpu"], None, {}, 1,
                 r"--device gpu: .*GPU.* or stay on the CPU with --device cpu", marks=NEEDS_NO_GPU),
    ("demo-out-holds-an-earlier-run", ["demo", "--quick", "--out", "{D}/run"], None, {}, 2,
     r"--out .*run already holds checkpoint_0000002\.npz of an earlier run: move its files away"),
    # ---- one owner per run folder, outputs written safely: pipes, long names, another run's resume
    ("bpe-input-is-a-device", BPE_OWN + ["--vocab-size", "270", "--input", "null"], None, {"null": TO_DEV_NULL}, 2,
     r"--input file null is a pipe or a device, not a file: it must be a file that can be read more than once"),
    ("average-input-is-a-device", ["average", "null", "--output", "avg.npz"], None, {"null": TO_DEV_NULL}, 2,
     r"checkpoint null is a pipe or a device, not a file"),
    ("bpe-output-name-too-long", ["bpe", "--input", "{D}/train.src", "--vocab-size", "270", "--output", "t" * 256],
     None, {}, 2, r"--output t+: the file name is 256 bytes long, more than the 255 a file name may have"),
    ("train-resume-another-corpus", train("--resume", "{D}/run/checkpoint_0000002.npz", "--train-src", "{D}/train.tgt",
                                          "--train-tgt", "{D}/train.src"), None, {}, 1,
     r"checkpoint_0000002\.npz was trained on another corpus \(.*\): resume it with the files it was trained on"),
    ("train-resume-another-schedule", train("--resume", "{D}/run/checkpoint_0000002.npz", "--lr-scale", "2"), None, {},
     1, r"checkpoint_0000002\.npz was trained with another schedule: lr_scale 1\.0 there, 2\.0 here"),
    ("translate-checkpoint-is-a-device", ["translate", "--checkpoint", "null", "--input", "in.txt", "--output",
                                          "out.txt"], None, {**OLD, "null": TO_DEV_NULL}, 2,
     r"--checkpoint file null is a pipe or a device, not a file"),
    ("demo-out-holds-an-earlier-tokenizer", ["demo", "--quick", "--out", "d"], None, {"d/tokenizer.json": b"{}"}, 2,
     r"--out d already holds tokenizer\.json of an earlier run"),
    ("train-config-too-big-for-the-tokenizer",  # before the corpus is read: its bad UTF-8 is never seen
     train("--tokenizer", "big_tok.json", "--config", "huge.json", "--train-src", "bad.src"), None,
     {"big_tok.json": BIG_TOK, "huge.json": HUGE_CONFIG, "bad.src": b"\xff\n"}, 2,
     r"config file huge\.json: the model would hold 2,163,856,804 floats \(vocab_size 1,000, d_model 13,300"),
    # ---- one 2 MB line without a space: refused or dropped before it is encoded
    ("translate-2mb-line", TRANSLATE, None, {**OLD, "in.txt": b"1 2\n" + MB2_LINE}, 1,
     r"in\.txt: line 2 has 2,000,000 characters, more than 31 tokens can spell"),
    ("train-2mb-line", train("--train-src", "long.src", "--train-tgt", "one.tgt"), None,
     {"long.src": MB2_LINE, "one.tgt": b"twelve\n"}, 1,
     r"no sentence pairs to train on in long\.src and one\.tgt: kept 0 of 1 pairs \(0 empty, 1 longer than 31 tokens\)"),
    # ---- every allocation bounded before it is made: devices, endless lines, archives, patterns, sizes
    ("translate-input-dev-zero", TRANSLATE + ["--input", "zero"], None, {**OLD, "zero": TO_DEV_ZERO}, 1,
     r"zero is a device, not a file"),
    ("translate-tokenizer-dev-zero", TRANSLATE + ["--tokenizer", "zero"], None, {**OLD, "zero": TO_DEV_ZERO}, 2,
     r"--tokenizer file zero is a pipe or a device, not a file"),
    ("bleu-hypotheses-dev-zero", ["bleu", "zero", "r.txt"], None, {"zero": TO_DEV_ZERO, "r.txt": b"a\n"}, 1,
     r"zero is a device, not a file"),
    ("train-train-src-dev-zero", train("--train-src", "zero"), None, {"zero": TO_DEV_ZERO}, 1,
     r"zero is a device, not a file"),
    ("translate-stdin-endless-line", TRANSLATE + ["--input", "-"], b"7" * (3 << 20), OLD, 1,
     r"stdin: line 1 is longer than the 2,097,152 bytes a line may have"),
    ("translate-input-gzip-of-zeros", TRANSLATE + ["--input", "z.gz"], None, {**OLD, "z.gz": ZEROS_GZ}, 1,
     r"z\.gz: line 1 is longer than the 2,097,152 bytes a line may have"),
    ("bpe-input-3mb-line", BPE_OWN + ["--vocab-size", "300", "--input", "long.txt"], None,
     {**OLD_TOK, "long.txt": b"a" * (3 << 20) + b"\n"}, 1, r"long\.txt: line 1 is longer than the 2,097,152 bytes"),
    ("translate-checkpoint-lying-directory", TRANSLATE + ["--checkpoint", "liar.npz"], None,
     {**OLD, "liar.npz": LYING_NPZ}, 1,
     r"liar\.npz: its zip directory says model/w\.npy packs 3,145,728 bytes, more than the file's [\d,]+"),
    ("average-checkpoint-claims-a-gigabyte", ["average", "{D}/model.npz", "bomb.npz", "--output", "avg.npz"], None,
     {**OLD_AVG, "bomb.npz": BOMB_CLAIM_NPZ}, 1, r"bomb\.npz: its members inflate to 1,073,7\d\d,\d+ bytes from a file of"),
    ("translate-checkpoint-encrypted-member", TRANSLATE + ["--checkpoint", "enc.npz"], None,
     {**OLD, "enc.npz": ENCRYPTED_NPZ}, 1, r"enc\.npz: its member model/w\.npy is encrypted"),
    ("translate-checkpoint-header-cut-in-its-dict", TRANSLATE + ["--checkpoint", "cut.npz"], None,
     {**OLD, "cut.npz": CUT_HEADER_NPZ}, 1, r"cut\.npz: model/w has a damaged array header"),
    ("average-checkpoint-header-zeroed", ["average", "{D}/model.npz", "zero.npz", "--output", "avg.npz"], None,
     {**OLD_AVG, "zero.npz": ZEROED_HEADER_NPZ}, 1, r"zero\.npz: model/w has a damaged array header"),
    ("translate-checkpoint-meta-json-bomb", TRANSLATE + ["--checkpoint", "bomb.npz"], None,
     {**OLD, "bomb.npz": meta_bomb(9_000_000)}, 1,
     r"bomb\.npz: its meta\.json entry is damaged \(its JSON holds [\d,]+ values or more, more than 8,388,608\)"),
    ("translate-tokenizer-counted-repeat", TRANSLATE + ["--tokenizer", "rep.json"], None,
     {**OLD, "rep.json": tokenizer_json(r"a{2000000000}|[\s\S]")}, 1,
     r"rep\.json is a damaged tokenizer file: the pattern .* repeats too much"),
    ("translate-tokenizer-nested-repeats", TRANSLATE + ["--tokenizer", "rep.json"], None,
     {**OLD, "rep.json": tokenizer_json(r"(?:a{1000}){1000}{1000}|[\s\S]")}, 1,
     r"rep\.json is a damaged tokenizer file: the pattern .* repeats too much"),
    ("translate-tokenizer-pattern-too-long", TRANSLATE + ["--tokenizer", "long.json"], None,
     {**OLD, "long.json": tokenizer_json("a|" * 3000 + r"[\s\S]")}, 1,
     r"long\.json is a damaged tokenizer file: the pattern .* has 6,006 characters, more than 4,096"),
    ("translate-tokenizer-too-many-specials", TRANSLATE + ["--tokenizer", "sp.json"], None,
     {**OLD, "sp.json": tokenizer_json(specials=[f"<s{k}>" for k in range(5000)])}, 1,
     r"sp\.json is a damaged tokenizer file: 5,003 special tokens are too many: at most 1,024"),
    ("translate-tokenizer-merges-as-objects", TRANSLATE + ["--tokenizer", "obj.json"], None,
     {**OLD, "obj.json": tokenizer_json(merges=[{"left": 100, "right": 100, "text": "aa"}])}, 1,
     r"obj\.json is a damaged tokenizer file: merge 0 is \{'left': 100, .* not \[left id, right id, \"its text\"\]"),
    ("translate-tokenizer-nan", TRANSLATE + ["--tokenizer", "nan.json"], None,
     {**OLD, "nan.json": tokenizer_json().replace(b'"version": 1', b'"version": NaN')}, 1,
     r"nan\.json is not a tokenizer file: it is not valid JSON \(NaN is not a JSON number\)"),
    # ---- every damaged file a sentence (crafted from the shared checkpoint by the fixture)
    ("average-meta-step-a-list", ["average", "{D}/model.npz", "{D}/step_list.npz", "--output", "avg.npz"], None,
     OLD_AVG, 1, r"step_list\.npz holds a damaged meta\.json: its step is \[6\], not a whole number of at least 0"),
    ("average-meta-step-an-object", ["average", "{D}/model.npz", "{D}/step_dict.npz", "--output", "avg.npz"], None,
     OLD_AVG, 1, r"step_dict\.npz holds a damaged meta\.json: its step is \{\}, not a whole number"),
    ("average-meta-nan", ["average", "{D}/model.npz", "{D}/meta_nan.npz", "--output", "avg.npz"], None, OLD_AVG, 1,
     r"meta_nan\.npz: its meta\.json entry is damaged \(NaN is not a JSON number\)"),
    ("average-meta-config-a-list", ["average", "{D}/model.npz", "{D}/config_list.npz", "--output", "avg.npz"], None,
     OLD_AVG, 1, r"config_list\.npz holds a damaged meta\.json: its config is \[1, 2\], not a JSON object"),
    ("train-resume-step-counts-short", train("--resume", "{D}/t_short.npz"), None, {}, 1,
     r"t_short\.npz holds damaged optimizer state: \d+ step counts for \d+ parameters"),
    ("train-resume-moments-missing", train("--resume", "{D}/no_m3.npz"), None, {}, 1,
     r"no_m3\.npz holds damaged optimizer state: optim/m\.3 is missing \(parameter 3 has taken steps\)"),
    ("train-resume-float16-moments", train("--resume", "{D}/half.npz"), None, {}, 1,
     r"half\.npz: optim/m\.0 holds float16 values; a checkpoint holds float32 or float64 arrays only"),
    ("train-resume-float64-moments", train("--resume", "{D}/double.npz"), None, {}, 1,
     r"double\.npz holds damaged optimizer state: optim/m\.0 holds float64 values, but the model's are float32"),
    ("train-resume-batch-index-past-the-epoch", train("--resume", "{D}/index.npz"), None, {}, 1,
     r"index\.npz cannot be resumed from: cannot resume the batch stream: its batch index 1,000,000 is past the "
     r"\d+ batches of an epoch"),
    ("translate-weights-that-overflow", TRANSLATE + ["--checkpoint", "{D}/huge_weights.npz"], None, OLD, 1,
     r"huge_weights\.npz: its weights make the model's scores NaN or infinite \(they overflow float32\)"),
    ("average-weights-past-float32", ["average", "{D}/model.npz", "{D}/past_float32.npz", "--output", "avg.npz"], None,
     OLD_AVG, 1, r"past_float32\.npz: model/\S+ holds values past float32's range"),
    # ---- a time budget per file of text encoded, not per call: 200 short lines cannot add up to minutes
    ("translate-slow-pattern-many-lines", TRANSLATE + ["--checkpoint", "{D}/slow.npz", "--input", "x.txt"], None,
     {**OLD, "x.txt": X_LINES * 200}, 1, r"the pattern .* of the tokenizer embedded in .*slow\.npz backtracks "
     r"catastrophically: it ran out of its time budget of 1 s per 100,000 characters"),
    ("train-slow-pattern-many-lines", train("--tokenizer", "{D}/slow_tok.json", "--train-src", "x.src", "--train-tgt",
                                            "x.tgt"), None, {"x.src": X_LINES * 200, "x.tgt": X_LINES * 200}, 1,
     r"the pattern .* of .*slow_tok\.json backtracks catastrophically"),
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The module's directory of shared files (see the docstring), with a checkpoint trained 2 steps."""
    d = tmp_path_factory.mktemp("shared")
    for name, lines in {"train.src": SOURCES, "train.tgt": TARGETS, "valid.src": SOURCES[:2],
                        "valid.tgt": TARGETS[:2]}.items():
        (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "config.json").write_text(json.dumps({"preset": "tiny", "d_model": 32, "d_ff": 64, "n_heads": 2,
                                               "n_layers": 1, "max_len": 32}))
    argv = train("--vocab-size", "300", "--out", str(d / "run"), drop=["--tokenizer"])
    argv = [a.replace("{D}", str(d)) for a in argv]
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(argv) == 0
    (d / "model.npz").write_bytes((d / "run" / "checkpoint_0000002.npz").read_bytes())
    (d / "tok.json").write_bytes((d / "run" / "tokenizer.json").read_bytes())
    BPE.train(["x y z"], 262, min_frequency=1).save(d / "other_tok.json")
    BPE(BPE.load(d / "tok.json").merges, pattern=r"\s+|\S").save(d / "foreign_tok.json")  # the same size, not its own
    craft_checkpoints(d)
    return d


def craft_checkpoints(d):
    """Damaged copies of model.npz in d, each with one fault (see the rows that use them), written with
    np.savez as a hostile or broken writer would, not through the code under test."""
    source = np.load(d / "model.npz")
    arrays = {k[:-len(".npy")] if k.endswith(".npy") else k: source[k] for k in source.files}
    meta = json.loads(arrays.pop("meta.json").tobytes())
    slow = BPE(BPE.load(d / "tok.json").merges, pattern=SLOW_PATTERN)
    slow.save(d / "slow_tok.json")
    n = meta["optimizer"]["n_params"]
    faults = {  # name: (meta changes, arrays changes; None removes an entry)
        "step_list": ({"step": [6]}, {}), "step_dict": ({"step": {}}, {}), "meta_nan": ({"best_bleu": "NaN"}, {}),
        "config_list": ({"config": [1, 2]}, {}),
        "t_short": ({"optimizer": {**meta["optimizer"], "t": meta["optimizer"]["t"][:n - 1]}}, {}),
        "no_m3": ({}, {"optim/m.3": None, "optim/v.3": None}),
        "half": ({}, {"optim/m.0": arrays["optim/m.0"].astype(np.float16)}),
        "double": ({}, {"optim/m.0": arrays["optim/m.0"].astype(np.float64),
                        "optim/v.0": arrays["optim/v.0"].astype(np.float64)}),
        "index": ({"iterator": {**meta["iterator"], "index": 1_000_000}}, {}),
        "slow": ({"tokenizer": slow.to_json()}, {}),
        "huge_weights": ({}, {k: np.full_like(v, 1e30) for k, v in arrays.items() if k.startswith("model/")}),
        "past_float32": ({"optimizer": None}, {k: np.full(v.shape, 1e300) if k.startswith("model/") else None
                                               for k, v in arrays.items() if k.startswith(("model/", "optim/"))}),
    }
    for name, (meta_change, array_change) in faults.items():
        members = {**arrays, **array_change}
        text = json.dumps({**meta, **meta_change}).replace('"NaN"', "NaN")
        members = {k: v for k, v in members.items() if v is not None}
        np.savez(d / f"{name}.npz", **members, **{"meta.json": np.frombuffer(text.encode(), np.uint8)})


def snapshot(*roots):
    """{path: bytes of a file, or None for a directory} of everything under the roots."""
    found = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found.update({os.path.join(dirpath, n): None for n in dirnames})
            found.update({os.path.join(dirpath, n): ("link", os.readlink(Path(dirpath, n)))  # /dev/zero: never read
                          if Path(dirpath, n).is_symlink() else Path(dirpath, n).read_bytes() for n in filenames})
    return found


def params(rows):
    """The rows as pytest params, each with its id (a row made with pytest.param keeps its marks)."""
    return [pytest.param(*r.values, id=r.values[0], marks=r.marks) if hasattr(r, "values")
            else pytest.param(*r, id=r[0]) for r in rows]


@pytest.mark.parametrize("row_id, argv, stdin, files, code, message", params(ROWS))
def test_bad_input(row_id, argv, stdin, files, code, message, shared, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    locked = []
    for name, content in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is READ_ONLY_DIR:
            path.mkdir()
            path.chmod(0o555)
            locked.append(path)
        elif id(content) in DEVICES:
            path.symlink_to(DEVICES[id(content)])
        else:
            path.write_bytes(content)
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8"))
    before = snapshot(work, shared)
    try:
        got = cli.main([a.replace("{D_NAME}", shared.name).replace("{D}", str(shared)) for a in argv])
    finally:
        for path in locked:
            path.chmod(0o755)
    _, err = capsys.readouterr()
    assert "Traceback" not in err and ".tmp-" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"stderr should be one line, got:\n{err}"
    assert lines[0].startswith(f"python -m minitransformer {argv[0]}: error: "), err
    assert re.search(message, lines[0]), f"{message!r} not in: {lines[0]}"
    assert got == code, err
    after = snapshot(work, shared)
    changed = sorted(p for p, content in before.items() if after.get(p, "gone") != content)
    assert not changed, f"changed or removed: {changed}"
    if code == 2:  # a refused argument: nothing written, no directory made
        assert sorted(after) == sorted(before), f"created: {sorted(set(after) - set(before))}"


def test_a_read_only_output_is_refused_not_replaced(tmp_path, monkeypatch):
    """Renaming over a read-only file succeeds in a writable directory: writable_file refuses it first.
    (os.access is stood in for: as root every file is writable, and the suite may run as root.)"""
    from minitransformer.cli.common import UsageError, writable_file
    (tmp_path / "out.txt").write_text("keep me")
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).endswith("out.txt"))
    with pytest.raises(UsageError, match=r"--output .*out\.txt is read-only"):
        writable_file(str(tmp_path / "out.txt"), "--output")
    assert writable_file(str(tmp_path / "new.txt"), "--output") == str(tmp_path / "new.txt")


def test_sigterm_before_training_is_one_line_and_143(tmp_path, monkeypatch, capsys):
    """SIGTERM while a subcommand is still preparing (here: learning a BPE) ends it like Ctrl-C, with a
    message and 143, instead of killing the process without a word; the handler before is put back."""
    def learn(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)                                       # the handler raises before this ends
        raise AssertionError("SIGTERM was not handled")
    monkeypatch.setattr(BPE, "train", learn)
    (tmp_path / "c.txt").write_text("a b c\n")
    before = signal.getsignal(signal.SIGTERM)
    code = cli.main(["bpe", "--input", str(tmp_path / "c.txt"), "--vocab-size", "300",
                     "--output", str(tmp_path / "tok.json"), "--quiet"])
    assert code == 143 and capsys.readouterr().err.strip() == "python -m minitransformer bpe: terminated (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) is before and not (tmp_path / "tok.json").exists()


@pytest.mark.parametrize("signum, code, word",
                         [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_saves_and_exits(signum, code, word, shared, tmp_path):
    out = tmp_path / "run"
    argv = [a.replace("{D}", str(shared)) for a in train("--steps", "100000", "--out", str(out))]
    with open(tmp_path / "stdout.txt", "wb") as stdout:
        def default_sigint():  # a shell's background job ignores SIGINT, and Python would keep ignoring it
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        process = subprocess.Popen([sys.executable, "-m", "minitransformer", *argv], cwd=ROOT, stdout=stdout,
                                   stderr=subprocess.PIPE, preexec_fn=default_sigint)  # noqa: PLW1509
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                log = out / "log.jsonl"
                if log.exists() and sum('"loss"' in line for line in log.read_text().splitlines()) >= 2:
                    break                                   # a few steps done: training is under way
                time.sleep(0.1)
            assert process.poll() is None, process.communicate()[1].decode()
            process.send_signal(signum)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    err = err.decode()
    assert process.returncode == code, err
    assert f"train: {word}" in err and "checkpoint saved" in err and "Traceback" not in err, err
    saved = list_checkpoints(out)
    assert saved and str(saved[-1]) in err
    assert ckpt.load(saved[-1]).step >= 2


def test_a_failed_write_names_the_output_not_the_temporary(shared, tmp_path, monkeypatch, capsys):
    """--output passes the checks, then the disk fills up: the message names --output, the old file stays."""
    def full_disk(path, write, mode="wb"):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".tmp-x1y2-tok.json"))
    monkeypatch.setattr("minitransformer.text.bpe.atomic_write", full_disk)
    old = tmp_path / "tok.json"
    old.write_bytes(b"an earlier tokenizer\n")
    code = cli.main(["bpe", "--input", str(shared / "train.src"), "--vocab-size", "270", "--output", str(old),
                     "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and f"--output {old} cannot be written: No space left on device" in err and ".tmp-" not in err
    assert old.read_bytes() == b"an earlier tokenizer\n"


@pytest.mark.parametrize("command", ["translate", "bleu"])
def test_a_reader_that_goes_away_ends_quietly_as_cat_does(command, shared, tmp_path):
    """`... | head -0`: stdout's reader is gone before a line is written. The command ends as `cat` does,
    killed by SIGPIPE: exit 141 (128 + 13, so `set -o pipefail` sees it) and not a word on stderr (no
    traceback, no "Broken pipe", no "Exception ignored" when Python flushes stdout at exit)."""
    (tmp_path / "in.txt").write_text("1 2\n3 4\n")
    argv = {"translate": ["translate", "--checkpoint", str(shared / "model.npz"), "--input", "in.txt"],
            "bleu": ["bleu", "in.txt", str(shared / "valid.src")]}[command]
    read, write = os.pipe()
    os.close(read)                                            # head -0: gone at once
    try:
        done = subprocess.run([sys.executable, "-m", "minitransformer", *argv], cwd=tmp_path, stdout=write,
                              stderr=subprocess.PIPE, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write)
    assert (done.returncode, done.stderr.decode()) == (141, "")


def test_bpe_learns_a_2mb_line_without_a_space(tmp_path, capsys):
    """One 2 MB line without a space is one word of 2,000,000 letters: learning and the report after it
    take about linear time (tests/test_bpe_learn.py and tests/test_bpe.py hold the growth), seconds here."""
    (tmp_path / "long.txt").write_bytes(b"1 2\n" + MB2_LINE)
    code = cli.main(["bpe", "--input", str(tmp_path / "long.txt"), "--vocab-size", "262",
                     "--output", str(tmp_path / "tok.json"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0 and "learned 3 merges" in out and "tokens for 3 words" in out, err


# ---- hostile inputs under a memory limit: a bound that regressed fails here instead of taking the machine
MEMORY_LIMIT = 5 << 29                                   # 2.5 GiB of address space for the whole process
LIMITED = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
           "from minitransformer import cli; sys.exit(cli.main(sys.argv[1:]))").format(MEMORY_LIMIT)
TEXT_BOMB = gzip.compress((b"a" * 999 + b"\n") * 1024, 9) * 300      # 300 MiB of lines from about 300 KB


@pytest.mark.parametrize("argv, files, message", [
    (TRANSLATE + ["--tokenizer", "rep.json"], {"rep.json": tokenizer_json(r"a{2000000000}|[\s\S]")},
     r"rep\.json is a damaged tokenizer file: the pattern .* repeats too much"),
    (TRANSLATE + ["--checkpoint", "liar.npz"], {"liar.npz": LYING_NPZ}, r"liar\.npz: its zip directory says"),
    (TRANSLATE + ["--input", "big.gz"], {"big.gz": TEXT_BOMB},
     r"big\.gz holds more than the 134,217,728 bytes of text a file may hold"),
    (TRANSLATE + ["--input", "zero"], {"zero": TO_DEV_ZERO}, r"zero is a device, not a file"),
    (BPE_OWN + ["--vocab-size", "300", "--input", "long.txt"], {"long.txt": b"a" * (20 << 20) + b"\n"},
     r"long\.txt: line 1 is longer than the 2,097,152 bytes a line may have"),
], ids=["pattern-of-2e9-repeats", "zip-directory-claiming-3-GiB", "gzip-of-300-MiB-of-lines", "dev-zero",
        "bpe-20-MB-line"])
def test_hostile_inputs_fail_within_a_memory_limit(argv, files, message, shared, tmp_path):
    """Each input would take gigabytes if its bound were gone (the pattern's repeats, the archive's claimed
    sizes, the corpus streamed with a cap, /dev/zero, a line's length); run under RLIMIT_AS it must end in
    one line naming the file, exit 1, within the limit (a MemoryError would be a traceback)."""
    for name, content in files.items():
        if id(content) in DEVICES:
            (tmp_path / name).symlink_to(DEVICES[id(content)])
        else:
            (tmp_path / name).write_bytes(content)
    (tmp_path / "in.txt").write_bytes(OLD["in.txt"])
    argv = [a.replace("{D}", str(shared)) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", LIMITED, *argv], cwd=tmp_path, env=env, capture_output=True,
                          timeout=300)
    err = done.stderr.decode()
    assert done.returncode == 1 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "tok.json").exists()


def test_bleu_out_of_memory_is_one_sentence(tmp_path, monkeypatch, capsys):
    """sacreBLEU holds about 800 bytes a sentence: a file too large for the machine's memory ends in one
    sentence, not a MemoryError traceback (the allocation failure is stood in for: a real one needs GBs)."""
    def no_memory(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr("minitransformer.cli.bleu.corpus_bleu", no_memory)
    (tmp_path / "h.txt").write_text("a b\n")
    (tmp_path / "r.txt").write_text("a c\n")
    code = cli.main(["bleu", str(tmp_path / "h.txt"), str(tmp_path / "r.txt")])
    err = capsys.readouterr().err
    assert code == 1 and err.strip().endswith("error: BLEU of 1 sentences needs more memory than this machine "
                                              "gives: score the file in parts"), err
