"""checkpoint.py: the checkpoint file is plain npz + JSON (loaded without pickle), averaging is a mean of
compatible checkpoints, and every file that cannot be a checkpoint or a model is a clear error, found
before any array is allocated (hostile files are built here by hand with zipfile)."""
import io
import json
import os
import tracemalloc
import zipfile

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.run import checkpoint as ckpt
from minitransformer.run.translation import load_model
from minitransformer.text.bpe import BPE
from minitransformer.run.training import Trainer
from minitransformer.transformer import count_parameters

from conftest import f32_tol, quiet, tiny_model, training_config


def test_checkpoint_is_plain_npz(xp_backend, task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, training_config(steps=2), str(tmp_path), log=quiet)
    trainer.train()
    path = trainer.last_checkpoint
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert all(a.dtype != object for a in arrays.values())
    meta = json.loads(arrays["meta.json"].tobytes().decode("utf-8"))
    assert meta["step"] == 2 and meta["config"] == trainer.model.config.to_dict()
    assert meta["iterator"]["index"] >= 1 and meta["optimizer"]["steps"] == 2
    names = dict(trainer.model.named_parameters())
    assert {k for k in arrays if k.startswith("model/")} == {f"model/{k}" for k in names}
    assert any(k.startswith("optim/m.") for k in arrays)
    # the embedded tokenizer and config rebuild the same model
    model, tok2, ck = load_model(path)
    assert tok2.encode("3 4 , 5") == tok.encode("3 4 , 5")
    for k, p in names.items():
        np.testing.assert_array_equal(model.state_dict()[k], mt.to_numpy(p.data))
    # the JSONL log: one object per line, with losses and the evaluation
    records = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert any("loss" in r and "lr" in r and "tokens_per_s" in r for r in records)
    seconds = [r["seconds"] for r in records if "loss" in r or "bleu" in r]
    assert seconds == sorted(seconds) and seconds[0] >= 0                     # time since train() began
    assert any("bleu" in r and "bleu_signature" in r and "valid_loss" in r for r in records)


def test_average_is_the_mean(task, tmp_path):
    tok, _, _ = task
    paths, states = [], []
    for i in range(3):
        model = tiny_model(tok, seed=i)
        states.append(model.state_dict())
        paths.append(ckpt.save(tmp_path / f"c{i}.npz", states[-1], {"config": model.config.to_dict(), "step": i}))
    out = ckpt.average_files(paths, tmp_path / "avg.npz")
    avg = ckpt.load(out)
    assert set(avg.model) == set(states[0])  # the shared embedding once, as state_dict lists it
    assert "tgt_embed.weight" not in avg.model or "src_embed.weight" not in avg.model
    for k in states[0]:
        expect = np.mean([s[k] for s in states], axis=0)
        assert avg.model[k].dtype == np.float32
        # a mean of 3 float32 arrays, summed in another order or precision: 3 eps times the terms' size
        size = max(np.abs(s[k]).max() for s in states)
        np.testing.assert_allclose(avg.model[k], expect, rtol=0, atol=f32_tol(3, size))
    assert avg.meta["step"] == 2 and avg.meta["averaged_from"] == [str(p) for p in paths]


def test_average_refuses_other_configurations_tokenizers_and_a_step_twice(task, tmp_path):
    tok, _, _ = task

    def save(name, step, tokenizer="t", **overrides):
        model = tiny_model(tok, seed=step, **overrides)
        meta = {"config": model.config.to_dict(), "step": step, "tokenizer": tokenizer}
        return ckpt.save(tmp_path / name, model.state_dict(), meta)
    a, b = save("a.npz", 1), save("b.npz", 2)
    other = save("dropout.npz", 3, dropout=0.3)               # the same parameters: was averaged silently
    with pytest.raises(ckpt.CheckpointError, match=r"dropout\.npz with .*a\.npz: their model configurations differ"):
        ckpt.average([a, other])
    with pytest.raises(ckpt.CheckpointError, match="their tokenizers differ"):
        ckpt.average([a, save("other.npz", 4, tokenizer="u")])
    best = tmp_path / "checkpoint_best.npz"
    best.write_bytes(open(b, "rb").read())                     # the best copy of step 2
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint_best\.npz and .*b\.npz both hold step 2: the same "
                                                    r"checkpoint twice .* would weigh twice"):
        ckpt.average([a, b, best])
    with pytest.raises(TypeError, match="average takes a list of checkpoint files, got one"):
        ckpt.average(str(a))
    assert ckpt.average([a, b]).meta["step"] == 2


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="not found"):
        ckpt.load(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"this is not a zip file")
    with pytest.raises(ckpt.CheckpointError, match="bad.npz is not a readable checkpoint.*not a zip archive"):
        ckpt.load(bad)
    bad.write_text('{"format": "a tokenizer"}')             # np.load would call it pickled data
    with pytest.raises(ckpt.CheckpointError, match=r"not a zip archive$"):
        ckpt.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(ckpt.CheckpointError, match="not a minitransformer checkpoint"):
        ckpt.load(other)
    # truncated: the first half of a real checkpoint
    good = ckpt.save(tmp_path / "good.npz", {"w": np.ones((4, 4), np.float32)}, {"step": 1})
    data = open(good, "rb").read()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(ckpt.CheckpointError, match="cut.npz"):
        ckpt.load(cut)
    with pytest.raises(ckpt.CheckpointError, match="cannot average"):
        other2 = ckpt.save(tmp_path / "g2.npz", {"v": np.ones(3, np.float32)}, {"step": 2})
        ckpt.average([good, other2])


def test_checkpoint_files_that_cannot_be_a_model_are_refused(tmp_path):
    np.save(tmp_path / "weights.npy", np.ones(3, np.float32))
    os.rename(tmp_path / "weights.npy", tmp_path / "renamed.npz")
    with pytest.raises(ckpt.CheckpointError, match=r"renamed.npz holds a single array \(.npy\)"):
        ckpt.load(tmp_path / "renamed.npz")
    with pytest.raises(ckpt.CheckpointError, match=r"is a directory, not a checkpoint file"):
        ckpt.load(tmp_path)
    ckpt.save(tmp_path / "meta.npz", {"w": np.ones(2, np.float32)}, {"format": "mine", "step": 1})
    assert ckpt.load(tmp_path / "meta.npz").meta["step"] == 1       # the format marker is the checkpoint's own
    for name, array, message in (("int.npz", np.ones(4, np.int32), "holds int32 values"),
                                 ("nan.npz", np.array([1.0, np.nan], np.float32), "holds NaN or infinity")):
        ckpt.save(tmp_path / name, {"w": array}, {"step": 1})  # no config: any number of floats
        with pytest.raises(ckpt.CheckpointError, match=f"{name}: model/w {message}"):
            ckpt.load(tmp_path / name)


def test_a_tokenizer_that_does_not_fit_the_model_is_named(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    trainer.train()
    other = tmp_path / "other.json"
    BPE().save(other)                                                    # 259 ids: no merges
    with pytest.raises(ckpt.CheckpointError, match=r"other.json has 259 ids but the model in .* was built for 300"):
        load_model(trainer.last_checkpoint, str(other))
    with pytest.raises(ValueError, match="the tokenizer has 259 ids but the model was built for 300"):
        Trainer(tiny_model(tok), BPE.load(other), pairs, None, training_config(steps=1), log=quiet)


# ---------------------------------------------------------------- hostile files: validate first, then allocate
def npy(array=None, shape=None, data=b"", dtype="<f4"):
    """The bytes of a .npy member: a real array's, or a header declaring `shape` followed by `data`."""
    buffer = io.BytesIO()
    if array is not None:
        np.save(buffer, array)
        return buffer.getvalue()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def hostile(path, members, meta=None, compression=zipfile.ZIP_STORED):
    """A checkpoint written by hand: a valid meta.json and the given members (name -> bytes)."""
    meta = {"format": ckpt.FORMAT, "version": ckpt.VERSION, "step": 1, **(meta or {})}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("meta.json.npy", npy(np.frombuffer(json.dumps(meta).encode(), np.uint8)))
        for name, data in members.items():
            zf.writestr(name, data, compress_type=compression)
    return path


def refused_unread(path, message, monkeypatch):
    """load(path) raises CheckpointError matching message, having allocated and inflated almost nothing."""
    inflated = []
    read = zipfile.ZipExtFile.read
    monkeypatch.setattr(zipfile.ZipExtFile, "read", lambda self, n=-1: inflated.append(read(self, n)) or inflated[-1])
    tracemalloc.start()
    try:
        with pytest.raises(ckpt.CheckpointError, match=message):
            ckpt.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(map(len, inflated)) < 10_000 and peak < 1_000_000, (sum(map(len, inflated)), peak)


def test_an_array_header_is_checked_against_the_bytes_it_holds_before_any_array_is_read(tmp_path, monkeypatch):
    path = hostile(tmp_path / "liar.npz", {"model/w.npy": npy(shape=(10 ** 10,), data=bytes(16))})
    refused_unread(path, r"liar\.npz: model/w declares \(10000000000,\) float32 values \(40,000,000,000 bytes\) "
                         r"but holds 16 bytes", monkeypatch)
    path = hostile(tmp_path / "short.npz", {"model/w.npy": npy(shape=(2, 3), data=bytes(20))})   # 24 declared
    refused_unread(path, r"model/w declares \(2, 3\) float32 values \(24 bytes\) but holds 20", monkeypatch)
    path = hostile(tmp_path / "objects.npz", {"model/w.npy": npy(shape=(1,), data=bytes(8), dtype="|O")})
    refused_unread(path, r"model/w declares \(1,\) object values", monkeypatch)
    path = hostile(tmp_path / "ints.npz", {"optim/m.0.npy": npy(np.ones(3, np.int64))})
    refused_unread(path, r"optim/m\.0 holds int64 values; a checkpoint holds float32 or float64 arrays only", monkeypatch)


def test_members_no_checkpoint_holds_and_zip_bombs_are_refused_without_inflating(tmp_path, monkeypatch):
    zeros = bytes(8 << 20)   # 8 MiB of zeros: bzip2 packs them into a few dozen bytes
    path = hostile(tmp_path / "extra.npz", {"model/w.npy": npy(np.ones(2, np.float32)), "payload.bin": zeros},
                   compression=zipfile.ZIP_BZIP2)
    refused_unread(path, r"extra\.npz is not a minitransformer checkpoint: it holds 'payload\.bin', which no "
                         r"checkpoint holds", monkeypatch)
    path = hostile(tmp_path / "bomb.npz", {"model/w.npy": npy(shape=(2 << 20,), data=zeros)},
                   compression=zipfile.ZIP_BZIP2)
    refused_unread(path, r"bomb\.npz: model/w claims 8,388,736 bytes packed into \d+, more than compression can "
                         r"reach \(a zip bomb\)", monkeypatch)
    # an honest deflated checkpoint (np.savez_compressed of a real one) still loads
    path = hostile(tmp_path / "deflated.npz", {"model/w.npy": npy(np.ones(1000, np.float32))},
                   compression=zipfile.ZIP_DEFLATED)
    assert ckpt.load(path).model["w"].shape == (1000,)


def test_the_config_is_checked_against_the_arrays_before_a_model_is_built(task, tmp_path, monkeypatch):
    tok, _, _ = task
    model = tiny_model(tok)
    config = model.config.to_dict()
    monkeypatch.setattr("minitransformer.transformer.Transformer", None)    # building one would fail loudly
    huge = hostile(tmp_path / "huge.npz", {"model/w.npy": npy(np.ones(2, np.float32))},
                   {"config": {**config, "d_model": 16384, "n_heads": 2}})
    refused_unread(huge, r"huge\.npz: its model config is damaged \(TransformerConfig: the model would hold "
                         r"[\d,]+ floats .*over the limit", monkeypatch)
    few = hostile(tmp_path / "few.npz", {"model/w.npy": npy(np.ones(2, np.float32))}, {"config": config})
    n = count_parameters(model.config)
    refused_unread(few, rf"few\.npz: its model config implies {n:,} parameters but its arrays hold 2: the file is "
                        rf"damaged", monkeypatch)
    with pytest.raises(ckpt.CheckpointError, match=r"few\.npz: its model config implies"):
        load_model(few)
    monkeypatch.undo()
    state = model.state_dict()
    greedy = ckpt.save(tmp_path / "greedy.npz", state, {"config": config, "step": 1},
                       {"m.0": np.zeros(2 * n + 1, np.float32)})                # more than Adam's m and v
    with pytest.raises(ckpt.CheckpointError, match=rf"greedy\.npz holds {n:,} model and {2 * n + 1:,} optimizer "
                                                   rf"floats, more than"):
        ckpt.load(greedy)
    assert set(ckpt.load(ckpt.save(tmp_path / "good.npz", state, {"config": config})).model) == set(state)


def test_a_tokenizer_that_is_not_the_checkpoints_own_is_named(task, tmp_path):
    """Another tokenizer of the same number of ids would turn every id into another token: refused,
    naming what differs. The checkpoint's own tokenizer, given as a file, is accepted."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path / "run"), log=quiet)
    trainer.train()
    path = trainer.last_checkpoint
    tok.save(tmp_path / "own.json")
    assert load_model(path, str(tmp_path / "own.json"))[1].merges == tok.merges
    spare = next((a, b) for a in range(tok.offset, tok.vocab_size) for b in range(tok.offset, tok.vocab_size - 1)
                 if (a, b) not in tok.ranks)                       # a last merge no tokenizer of this task learned
    for name, foreign, what in (("merges.json", BPE(tok.merges[:-1] + [spare]), "merges"),
                                ("pattern.json", BPE(tok.merges, pattern=r"\s+|\S"), "pattern")):
        foreign.save(tmp_path / name)
        assert foreign.vocab_size == tok.vocab_size
        with pytest.raises(ckpt.CheckpointError, match=rf"{name} is not the tokenizer .* was trained with: "
                                                       rf"they differ in their {what}.*leave out --tokenizer"):
            load_model(path, str(tmp_path / name))
    # a checkpoint that embeds no tokenizer (written before) takes any tokenizer of its size, without a word
    old = ckpt.save(tmp_path / "old.npz", trainer.model.state_dict(), {"config": trainer.model.config.to_dict()})
    assert load_model(old, str(tmp_path / "pattern.json"))[1].pattern == r"\s+|\S"
