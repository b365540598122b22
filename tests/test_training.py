"""The Trainer and checkpoints: a tiny model overfits one batch, an interrupted and resumed run gives
the very same losses, checkpoints load without pickle, averaging is a mean, a NaN loss stops cleanly
with the last good checkpoint kept, Ctrl-C saves and returns."""
import json
import signal
import math
import os

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import checkpoint as ckpt
from minitransformer.cli import demo as demo_data
from minitransformer.bpe import BPE
from minitransformer.corpus import encode_pairs
from minitransformer.metrics import corpus_bleu, corpus_chrf
from minitransformer.rundir import RunDirectory, list_checkpoints
from minitransformer.training import Trainer, TrainingConfig, TrainingError, step_seed
from minitransformer.transformer import Transformer, TransformerConfig

from conftest import f32_tol


@pytest.fixture(scope="module")
def task():
    """A small generated corpus, its tokenizer and encoded pairs (shared by the module's tests)."""
    train, valid, _ = demo_data.make_splits(300, 12, 0, seed=3, max_numbers=2, max_digits=2)
    tok = BPE.train(train[0] + train[1], 300)
    pairs, _ = encode_pairs(train[0], train[1], tok)
    return tok, pairs, valid


def tiny_model(tok, dropout=0.1, seed=0, **overrides):
    mt.seed(seed)
    cfg = TransformerConfig.tiny(vocab_size=tok.vocab_size, d_model=32, d_ff=64, n_heads=2, n_layers=1,
                                 dropout=dropout, **overrides)
    return Transformer(cfg)


def config(**kw):
    base = dict(steps=6, max_tokens=120, warmup_steps=4, lr_scale=1.0, eval_every=0, save_every=0,
                keep=3, progress=False)
    return TrainingConfig(**{**base, **kw})


def quiet(*args):
    pass


def test_overfits_one_batch(xp_backend, task):
    tok, pairs, _ = task
    model = tiny_model(tok, dropout=0.0, label_smoothing=0.0)
    few = pairs[:6]  # one batch: max_tokens covers them all
    trainer = Trainer(model, tok, few, None, config(steps=300, max_tokens=10_000, warmup_steps=20, lr_scale=2.0),
                      log=quiet)
    assert len(trainer.iterator) == 1
    trainer.train()
    losses = [trainer.losses[s] for s in sorted(trainer.losses)]
    assert losses[0] > 4.0 and losses[-1] < 0.05, (losses[0], losses[-1])


def test_accumulation_normalises_by_all_tokens(task):
    """An update over accum=2 batches sees the gradient of one batch holding both: the mean over
    all their target tokens (not the mean of the two batch means)."""
    tok, pairs, _ = task
    few = pairs[:8]
    grads = {}
    # a budget that cuts the 8 pairs into exactly two batches of unequal token counts
    budget = next(m for m in range(20, 200) if len(Trainer(tiny_model(tok), tok, few, None,
                                                           config(max_tokens=m), log=quiet).iterator) == 2)
    for accum, max_tokens in ((2, budget), (1, 10_000)):
        trainer = Trainer(tiny_model(tok, dropout=0.0), tok, few, None, config(accum=accum, max_tokens=max_tokens),
                          log=quiet)
        trainer.optimizer.step = lambda lr: grads.setdefault(accum, [p.grad.copy() for p in trainer.optimizer.params])
        if accum == 2:
            sizes = [b.n_tgt_tokens for b in trainer.iterator.epoch_batches()]
            assert len(sizes) == 2 and sizes[0] != sizes[1]
        trainer.train_step()
    # float32 gradients summed over batches of other shapes: a sum over the N target tokens of
    # per-token gradients, each through a softmax over V, relative to the array's size (the effect
    # tested, 1/2 against n_batch/N per batch, is some 10% of it)
    n = sum(b.n_tgt_tokens for b in trainer.iterator.epoch_batches()) + tok.vocab_size
    for a, b in zip(grads[2], grads[1]):
        np.testing.assert_allclose(a, b, rtol=0, atol=f32_tol(n, np.abs(b).max()))


def test_resume_gives_identical_losses(task, tmp_path):
    tok, pairs, valid = task
    kw = dict(steps=8, accum=2, max_tokens=100, save_every=3)
    full = Trainer(tiny_model(tok), tok, pairs, valid, config(**kw), str(tmp_path / "full"), log=quiet)
    full.train()

    def interrupt(trainer):
        if trainer.step == 5:
            raise KeyboardInterrupt
    first = Trainer(tiny_model(tok), tok, pairs, valid, config(**kw), str(tmp_path / "cut"), [interrupt], log=quiet)
    assert first.train()["stopped"] == "interrupted"
    again = Trainer(tiny_model(tok, seed=99), tok, pairs, valid, config(**kw), str(tmp_path / "cut"), log=quiet)
    again.resume(str(tmp_path / "cut" / "checkpoint_0000005.npz"))
    assert again.step == 5
    again.train()
    resumed = {**first.losses, **again.losses}
    assert sorted(resumed) == list(range(1, 9))
    assert [resumed[s] for s in range(1, 9)] == [full.losses[s] for s in range(1, 9)]  # bit for bit
    for (k, a), (_, b) in zip(full.model.state_dict().items(), again.model.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_checkpoint_is_plain_npz(xp_backend, task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, config(steps=2), str(tmp_path), log=quiet)
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
    model, tok2, ck = ckpt.load_model(path)
    assert tok2.encode("3 4 , 5") == tok.encode("3 4 , 5")
    for k, p in names.items():
        np.testing.assert_array_equal(model.state_dict()[k], mt.to_numpy(p.data))
    # the JSONL log: one object per line, with losses and the evaluation
    records = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert any("loss" in r and "lr" in r and "tokens_per_s" in r for r in records)
    seconds = [r["seconds"] for r in records if "loss" in r or "bleu" in r]
    assert seconds == sorted(seconds) and seconds[0] >= 0                     # time since train() began
    assert any("bleu" in r and "bleu_signature" in r and "valid_loss" in r for r in records)


def test_keeps_last_k_and_best(task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, config(steps=5, save_every=1, eval_every=2, keep=2),
                      str(tmp_path), log=quiet)
    trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == \
        ["checkpoint_0000004.npz", "checkpoint_0000005.npz"]
    best = ckpt.load(tmp_path / "checkpoint_best.npz")
    assert best.meta["best_bleu"] == trainer.best_bleu
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]  # no temporary file left


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
    for keep in (0, -1, None, 2.5):                           # keep=0 deleted each checkpoint it wrote
        with pytest.raises(ValueError, match="RunDirectory: keep must be an integer of at least 1"):
            RunDirectory(str(tmp_path), keep)


def test_list_checkpoints_skips_other_files_named_like_checkpoints(tmp_path):
    for name in ("checkpoint_0000002.npz", "checkpoint_avg_5.npz", "checkpoint_best.npz", "checkpoint_0000010.npz"):
        (tmp_path / name).write_bytes(b"")                     # checkpoint_avg_5.npz was an AttributeError
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == \
        ["checkpoint_0000002.npz", "checkpoint_0000010.npz"]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(xp_backend, task, tmp_path):
    tok, pairs, _ = task

    def poison(trainer):
        if trainer.step == 3:
            p = trainer.model.parameters()[0]
            p.data[...] = np.nan
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=8, save_every=2), str(tmp_path), [poison], log=quiet)
    with pytest.raises(TrainingError, match=r"nan at step 4.*checkpoint_0000002\.npz"):
        trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]
    good = ckpt.load(tmp_path / "checkpoint_0000002.npz")
    assert all(np.isfinite(a).all() for a in good.model.values())


def test_ctrl_c_saves_and_returns(xp_backend, task, tmp_path):
    tok, pairs, _ = task

    def stop(trainer):
        if trainer.step == 2:
            raise KeyboardInterrupt
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=50), str(tmp_path), [stop], log=quiet)
    summary = trainer.train()
    assert summary["stopped"] == "interrupted" and summary["step"] == 2
    assert ckpt.load(summary["checkpoint"]).step == 2


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


def test_step_seed_and_bleu():
    assert step_seed(0, 1) == step_seed(0, 1)
    assert len({step_seed(0, 1), step_seed(0, 2), step_seed(1, 1)}) == 3
    refs = ["the cat sat on the mat", "a dog ran in the park today"]
    score, signature = corpus_bleu(refs, [refs])
    assert score == pytest.approx(100.0) and "tok:13a" in signature
    assert corpus_bleu(["x y z w"], [["a b c d"]])[0] == pytest.approx(0.0)


def test_config_errors():
    with pytest.raises(ValueError, match="steps or epochs"):
        TrainingConfig()
    with pytest.raises(ValueError, match="accum"):
        TrainingConfig(steps=1, accum=0)


def test_epochs_set_the_number_of_steps(task):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=None, epochs=2, accum=2), log=quiet)
    assert trainer.total_steps == math.ceil(2 * len(trainer.iterator) / 2)


def test_resume_refuses_another_tokenizer(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=1), str(tmp_path), log=quiet)
    trainer.train()
    q = tok.offset + ord("q")
    other = BPE(list(tok.merges[:-1]) + [(q, q)])            # same vocabulary size, another last merge
    assert other.vocab_size == tok.vocab_size
    again = Trainer(tiny_model(tok), other, pairs, None, config(steps=2), str(tmp_path), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match="another tokenizer"):
        again.resume(trainer.last_checkpoint)


def test_resume_refuses_a_checkpoint_past_the_steps_asked_for(task, tmp_path):
    """Resuming step 2 with steps=1 would train nothing and write step 2 again with the new settings."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=2), str(tmp_path), log=quiet)
    trainer.train()
    saved = open(trainer.last_checkpoint, "rb").read()
    again = Trainer(tiny_model(tok), tok, pairs, None, config(steps=1), str(tmp_path), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match=r"is at step 2, past the 1 steps of this run: ask for 2 steps"):
        again.resume(trainer.last_checkpoint)
    assert again.step == 0 and open(trainer.last_checkpoint, "rb").read() == saved
    Trainer(tiny_model(tok), tok, pairs, None, config(steps=2), str(tmp_path), log=quiet).resume(trainer.last_checkpoint)


# ---------------------------------------------------------------- faults that must not lose or poison work
@pytest.mark.parametrize("lr_scale", [1e6, 1e7])
def test_divergence_stops_and_names_a_finite_checkpoint(task, tmp_path, lr_scale):
    """A huge rate makes the weights non-finite (1e6) or the loss huge but finite (1e7): either way the
    run stops, and the checkpoint it names holds only finite arrays (none is written after the blow-up)."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None,
                      config(steps=40, warmup_steps=1, lr_scale=lr_scale, save_every=1, keep=50), str(tmp_path), log=quiet)
    with pytest.raises(TrainingError, match="training stopped") as info:
        trainer.train()
    named = [w for w in str(info.value).replace(";", " ").split() if w.endswith(".npz")]
    for path in named + list_checkpoints(str(tmp_path)):
        ck = ckpt.load(path)
        assert all(np.isfinite(a).all() for a in {**ck.model, **ck.optim}.values()), path


def test_resume_refuses_a_directory_with_later_checkpoints_and_keeps_other_files(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, config(steps=6, save_every=2, keep=5), str(tmp_path), log=quiet)
    first.train()
    earlier = Trainer(tiny_model(tok), tok, pairs, None, config(steps=8, keep=1), str(tmp_path), log=quiet)
    earlier.resume(str(tmp_path / "checkpoint_0000002.npz"))
    log = open(tmp_path / "log.jsonl").read()
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint_0000006\.npz, a later step than 2"):
        earlier.train()
    assert len(list_checkpoints(str(tmp_path))) == 3                     # nothing deleted
    assert open(tmp_path / "log.jsonl").read() == log                   # not even a "start" line written
    # resuming the latest works, and pruning (keep=1) spares the files this run did not write
    latest = Trainer(tiny_model(tok), tok, pairs, None, config(steps=8, save_every=1, keep=1), str(tmp_path), log=quiet)
    latest.resume(list_checkpoints(str(tmp_path))[-1])
    summary = latest.train()
    names = [os.path.basename(p) for p in list_checkpoints(str(tmp_path))]
    assert names == ["checkpoint_0000002.npz", "checkpoint_0000004.npz", "checkpoint_0000006.npz",
                     "checkpoint_0000008.npz"]
    assert os.path.exists(summary["checkpoint"])


def test_sigterm_saves_like_ctrl_c_and_stale_temporaries_are_removed(task, tmp_path):
    tok, pairs, _ = task
    stale = tmp_path / ".tmp-k9x2-checkpoint_0000001.npz"                # what kill -9 mid-save leaves
    stale.write_bytes(b"half a file")

    def terminate(trainer):
        if trainer.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=8), str(tmp_path), [terminate], log=quiet)
    summary = trainer.train()
    assert summary["stopped"] == "terminated" and summary["step"] == 3
    assert os.path.basename(summary["checkpoint"]) == "checkpoint_0000003.npz"
    assert not stale.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL                 # the handler is put back


@pytest.mark.parametrize("signum, stopped", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")])
def test_a_signal_while_the_update_is_applied_stops_after_it_and_resumes_bit_for_bit(task, tmp_path, signum, stopped):
    """Ctrl-C or SIGTERM landing in Adam's update (the weights half written, the step not yet counted)
    stops the run once the update is whole: its checkpoint and logged loss are of that step."""
    tok, pairs, _ = task
    full = Trainer(tiny_model(tok), tok, pairs, None, config(steps=6), str(tmp_path / "full"), log=quiet)
    full.train()
    cut = Trainer(tiny_model(tok), tok, pairs, None, config(steps=6), str(tmp_path / "cut"), log=quiet)
    update = cut.optimizer._update

    def update_then_signal(*arrays):  # the signal arrives once the weights of this piece are written
        update(*arrays)
        if cut.step == 2:
            os.kill(os.getpid(), signum)
    cut.optimizer._update = update_then_signal
    summary = cut.train()
    assert summary["stopped"] == stopped and summary["step"] == 3 and sorted(cut.losses) == [1, 2, 3]
    again = Trainer(tiny_model(tok, seed=99), tok, pairs, None, config(steps=6), str(tmp_path / "cut"), log=quiet)
    again.resume(summary["checkpoint"])
    again.train()
    assert [{**cut.losses, **again.losses}[s] for s in range(1, 7)] == [full.losses[s] for s in range(1, 7)]


def test_data_parallel_stop_logs_the_loss_of_the_last_update(task, tmp_path):
    """Every rank stops after the update during which a rank saw SIGTERM; that update's loss is logged
    (and checked) like any other before its checkpoint is written."""
    from minitransformer import distributed

    class RankZeroOfTwo(distributed.LocalWorld):
        size = 2  # its partner adds nothing to the sums: enough to see where the ranks stop

    def terminate(trainer):
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # noted: the ranks stop after the next update
    trainer = Trainer(tiny_model(tok := task[0]), tok, task[1], None, config(steps=6), str(tmp_path), [terminate],
                      log=quiet, world=RankZeroOfTwo())
    summary = trainer.train()
    assert summary["stopped"] == "terminated" and summary["step"] == 3
    records = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3] and summary["last_loss"] == trainer.losses[3]


def test_the_best_copy_holds_the_weights_of_the_best_evaluation(task, tmp_path, monkeypatch):
    """Evaluating every 2 steps and saving every 4: the best copy is step 2's weights, not step 4's."""
    from minitransformer import evaluation
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, config(steps=6, eval_every=2, save_every=4, keep=5),
                      str(tmp_path), log=quiet)
    bleu = {2: 10.0, 4: 5.0, 6: 4.0}
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: {"bleu": bleu[trainer.step], "bleu_signature": ""})
    trainer.train()
    best, step_2 = ckpt.load(tmp_path / "checkpoint_best.npz"), ckpt.load(tmp_path / "checkpoint_0000002.npz")
    assert best.meta["step"] == 2 and best.meta["best_bleu"] == 10.0
    for k, a in step_2.model.items():
        np.testing.assert_array_equal(best.model[k], a, err_msg=k)


def test_final_save_comes_before_the_final_evaluation(task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, config(steps=2), str(tmp_path), log=quiet)
    trainer.evaluate = lambda: (_ for _ in ()).throw(RuntimeError("evaluation failed"))
    with pytest.raises(RuntimeError, match="evaluation failed"):
        trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]


@pytest.mark.parametrize("field, value", [
    ("steps", 0), ("steps", -3), ("epochs", 0.0), ("epochs", float("inf")), ("epochs", float("nan")),
    ("lr_scale", -1.0), ("lr_scale", 0.0), ("clip_norm", 0.0), ("clip_norm", float("nan")), ("clip_norm", -1.0),
    ("eval_sentences", -1), ("eval_sentences", 0), ("beam_size", 0), ("max_len_a", float("nan")),
    ("max_len_b", -1), ("alpha", -0.5), ("keep", 0), ("max_tokens", 0), ("accum", 0), ("warmup_steps", 0),
])
def test_training_config_refuses_values_that_make_no_sense(field, value):
    with pytest.raises(ValueError, match=f"TrainingConfig: {field} must"):
        TrainingConfig(**{"steps": 5, field: value})


def test_no_checkpoint_is_written_with_non_finite_weights(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=2), str(tmp_path), log=quiet)
    trainer.train()
    trainer.model.parameters()[0].data[0, 0] = np.nan                    # poisoned after the last save
    trainer.step += 1
    with pytest.raises(TrainingError, match=r"NaN or infinity .* the last good checkpoint is .*checkpoint_0000002\.npz"):
        trainer.save()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]


def test_checkpoint_files_that_cannot_be_a_model_are_refused(tmp_path):
    np.save(tmp_path / "weights.npy", np.ones(3, np.float32))
    os.rename(tmp_path / "weights.npy", tmp_path / "renamed.npz")
    with pytest.raises(ckpt.CheckpointError, match=r"renamed.npz holds a single array \(.npy\)"):
        ckpt.load(tmp_path / "renamed.npz")
    with pytest.raises(ckpt.CheckpointError, match=r"is a directory, not a checkpoint file"):
        ckpt.load(tmp_path)
    ckpt.save(tmp_path / "meta.npz", {"w": np.ones(2, np.float32)}, {"format": "mine", "step": 1})
    assert ckpt.load(tmp_path / "meta.npz").meta["step"] == 1       # the format marker is the checkpoint's own
    meta = {"config": TransformerConfig.tiny(vocab_size=300).to_dict(), "step": 1}
    for name, array, message in (("int.npz", np.ones(4, np.int32), "holds int32 values"),
                                 ("nan.npz", np.array([1.0, np.nan], np.float32), "holds NaN or infinity")):
        ckpt.save(tmp_path / name, {"w": array}, meta)
        with pytest.raises(ckpt.CheckpointError, match=f"{name}: model/w {message}"):
            ckpt.load(tmp_path / name)


def test_a_tokenizer_that_does_not_fit_the_model_is_named(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, config(steps=1), str(tmp_path), log=quiet)
    trainer.train()
    other = tmp_path / "other.json"
    BPE().save(other)                                                    # 259 ids: no merges
    with pytest.raises(ckpt.CheckpointError, match=r"other.json has 259 ids but the model in .* was built for 300"):
        ckpt.load_model(trainer.last_checkpoint, str(other))
    with pytest.raises(ValueError, match="the tokenizer has 259 ids but the model was built for 300"):
        Trainer(tiny_model(tok), BPE.load(other), pairs, None, config(steps=1), log=quiet)


def test_bleu_of_nothing_is_an_error_not_an_index_error():
    with pytest.raises(ValueError, match="hypotheses are empty"):
        corpus_bleu([], [[]])
    with pytest.raises(ValueError, match="reference list 1 has 1 sentences but there are 2"):
        corpus_bleu(["a", "b"], [["a"]])


def test_bleu_refuses_flat_references_single_strings_and_non_strings():
    hyps = ["ab", "cd"]
    for fn, metric in ((corpus_bleu, "BLEU"), (corpus_chrf, "chrF")):
        with pytest.raises(TypeError, match=rf"{metric}: references must be a list of reference lists .*not a list of"):
            fn(hyps, ["xy", "zw"])                                   # was scored against characters
        with pytest.raises(TypeError, match=f"{metric}: hypotheses must be a list of strings, got str"):
            fn("a b", [["a b"]])
        with pytest.raises(ValueError, match=f"{metric}: no reference list is given"):
            fn(hyps, [])
        with pytest.raises(TypeError, match=f"{metric}: reference list 1, sentence 2 is NoneType, not a string"):
            fn(hyps, [["ab", None]])
        with pytest.raises(TypeError, match=f"{metric}: hypothesis 1 is int, not a string"):
            fn([1, 2], [["1", "2"]])


def test_evaluate_refuses_unpaired_sources_before_translating(task, monkeypatch):
    from minitransformer import evaluation
    tok, _, (src, ref) = task
    model = tiny_model(tok)
    monkeypatch.setattr(evaluation, "translate_lines", lambda *a, **k: pytest.fail("translated before the check"))
    with pytest.raises(ValueError, match=f"evaluate: {len(src)} sources but 1 references"):
        evaluation.evaluate(model, tok, src, ref[:1])
    with pytest.raises(TypeError, match="evaluate: sources and references must be lists of sentences"):
        evaluation.evaluate(model, tok, src[:1], ref[0])
    with pytest.raises(ValueError, match="evaluate: BLEU scores one translation per sentence: nbest must be 1"):
        evaluation.evaluate(model, tok, src, ref, beam_size=2, nbest=2)
    with pytest.raises(ValueError, match="evaluate: no sentences to evaluate on"):
        evaluation.evaluate(model, tok, [], [])
    with pytest.raises(ValueError, match="validation_loss: the batches hold no target token"):
        evaluation.validation_loss(model, [])


def test_chrf_and_lowercased_bleu_come_with_their_signatures():
    hyps, refs = ["A man rides a horse ."], ["a man rides a horse ."]
    cased, _ = corpus_bleu(hyps, [refs])
    lower, signature = corpus_bleu(hyps, [refs], lowercase=True)
    assert lower == pytest.approx(100.0) and cased < 100.0 and "case:lc" in signature
    chrf, chrf_signature = corpus_chrf(refs, [refs])
    assert chrf == pytest.approx(100.0) and chrf_signature.startswith("nrefs:1")
