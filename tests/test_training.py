"""training.py: a tiny model overfits one batch, accumulation normalises by all tokens, an interrupted
and resumed run gives the very same losses, a NaN loss or a divergence stops cleanly with the last good
checkpoint kept, Ctrl-C and SIGTERM save and return."""
import json
import math
import os
import signal
import time

import numpy as np
import pytest

from minitransformer import backend

from minitransformer.run import checkpoint as ckpt
from minitransformer.run.rundir import list_checkpoints
from minitransformer.run.training import Trainer, TrainingError, step_seed

from conftest import f32_tol, quiet, tiny_model, training_config


def test_overfits_one_batch(xp_backend, task):
    tok, pairs, _ = task
    model = tiny_model(tok, dropout=0.0, label_smoothing=0.0)
    few = pairs[:6]  # one batch: max_tokens covers them all
    trainer = Trainer(model, tok, few, None,
                      training_config(steps=300, max_tokens=10_000, warmup_steps=20, lr_scale=2.0),
                      log=quiet)
    assert len(trainer.iterator) == 1
    trainer.train()
    losses = [trainer.losses[s] for s in sorted(trainer.losses)]
    # near zero loss Adam at this rate spikes now and then (the GPU's run: 0.03 at update 200, 0.50 at
    # 300), and where depends on the last bit of each sum (CPU or GPU, the BLAS): the least loss is asked
    assert losses[0] > 4.0 and min(losses) < 0.05, (losses[0], min(losses))


def test_accumulation_normalises_by_all_tokens(task):
    """An update over accum=2 batches sees the gradient of one batch holding both: the mean over
    all their target tokens (not the mean of the two batch means)."""
    tok, pairs, _ = task
    few = pairs[:8]
    grads = {}
    # a budget that cuts the 8 pairs into exactly two batches of unequal token counts
    budget = next(m for m in range(20, 200) if len(Trainer(tiny_model(tok), tok, few, None,
                                                           training_config(max_tokens=m), log=quiet).iterator) == 2)
    for accum, max_tokens in ((2, budget), (1, 10_000)):
        trainer = Trainer(tiny_model(tok, dropout=0.0), tok, few, None,
                          training_config(accum=accum, max_tokens=max_tokens),
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
    for a, b in zip(map(backend.to_numpy, grads[2]), map(backend.to_numpy, grads[1])):
        np.testing.assert_allclose(a, b, rtol=0, atol=f32_tol(n, np.abs(b).max()))


def test_resume_gives_identical_losses(xp_backend, task, tmp_path):
    """Bit for bit on the CPU; on a GPU (the same one, in one process) too, by construction: the embedding's
    backward adds in a fixed order (kernels.embedding_backward), dropout's Philox stream has a fixed number
    of states, cuBLAS and CuPy's reductions are deterministic on one GPU model."""
    tok, pairs, valid = task
    kw = dict(steps=8, accum=2, max_tokens=100, save_every=3)
    full = Trainer(tiny_model(tok), tok, pairs, valid, training_config(**kw), str(tmp_path / "full"), log=quiet)
    full.train()

    def interrupt(trainer):
        if trainer.step == 5:
            raise KeyboardInterrupt
    first = Trainer(tiny_model(tok), tok, pairs, valid, training_config(**kw), str(tmp_path / "cut"), [interrupt],
                    log=quiet)
    assert first.train()["stopped"] == "interrupted"
    again = Trainer(tiny_model(tok, seed=99), tok, pairs, valid, training_config(**kw), str(tmp_path / "cut"),
                    log=quiet)
    again.resume(str(tmp_path / "cut" / "checkpoint_0000005.npz"))
    assert again.step == 5
    again.train()
    resumed = {**first.losses, **again.losses}
    assert sorted(resumed) == list(range(1, 9))
    assert [resumed[s] for s in range(1, 9)] == [full.losses[s] for s in range(1, 9)]  # bit for bit, CPU and GPU
    for (k, a), (_, b) in zip(full.model.state_dict().items(), again.model.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_epochs_set_the_number_of_steps(task):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=None, epochs=2, accum=2), log=quiet)
    assert trainer.total_steps == math.ceil(2 * len(trainer.iterator) / 2)


def test_step_seed():
    assert step_seed(0, 1) == step_seed(0, 1)
    assert len({step_seed(0, 1), step_seed(0, 2), step_seed(1, 1)}) == 3


# ---------------------------------------------------------------- stopping: Ctrl-C, SIGTERM, divergence
def test_ctrl_c_saves_and_returns(xp_backend, task, tmp_path):
    tok, pairs, _ = task

    def stop(trainer):
        if trainer.step == 2:
            raise KeyboardInterrupt
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=50), str(tmp_path), [stop], log=quiet)
    summary = trainer.train()
    assert summary["stopped"] == "interrupted" and summary["step"] == 2
    assert ckpt.load(summary["checkpoint"]).step == 2


def test_sigterm_saves_like_ctrl_c_and_stale_temporaries_are_removed(task, tmp_path):
    tok, pairs, _ = task
    stale = tmp_path / ".tmp-k9x2ab_7-checkpoint_0000001.npz"            # what kill -9 mid-save leaves
    stale.write_bytes(b"half a file")
    os.utime(stale, (time.time() - 3600,) * 2)                               # an hour old, locked by no one

    def terminate(trainer):
        if trainer.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=8), str(tmp_path), [terminate],
                      log=quiet)
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
    full = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=6), str(tmp_path / "full"), log=quiet)
    full.train()
    cut = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=6), str(tmp_path / "cut"), log=quiet)
    update = cut.optimizer._update

    def update_then_signal(*arrays):  # the signal arrives once the weights of this piece are written
        update(*arrays)
        if cut.step == 2:
            os.kill(os.getpid(), signum)
    cut.optimizer._update = update_then_signal
    summary = cut.train()
    assert summary["stopped"] == stopped and summary["step"] == 3 and sorted(cut.losses) == [1, 2, 3]
    again = Trainer(tiny_model(tok, seed=99), tok, pairs, None, training_config(steps=6), str(tmp_path / "cut"),
                    log=quiet)
    again.resume(summary["checkpoint"])
    again.train()
    assert [{**cut.losses, **again.losses}[s] for s in range(1, 7)] == [full.losses[s] for s in range(1, 7)]  # CPU: bit for bit


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped exception
@pytest.mark.parametrize("signum, stopped", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_whose_exception_a_finalizer_drops_still_stops_the_run(task, tmp_path, signum, stopped):
    """Python prints and drops an exception raised inside `__del__` (Tensor.__del__ runs all through a
    step): the handler's note still stops the run after that update, never a run that goes on."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=8), str(tmp_path), log=quiet)
    loss = trainer.model.loss

    class SignalsWhenDropped:
        def __del__(self):
            os.kill(os.getpid(), signum)  # the handler runs here, inside the finalizer

    def loss_with_a_dropped_signal(*args):
        if trainer.step == 2:
            SignalsWhenDropped()  # made and dropped at once
        return loss(*args)
    trainer.model.loss = loss_with_a_dropped_signal
    summary = trainer.train()
    assert summary["stopped"] == stopped and summary["step"] == 3
    assert os.path.basename(summary["checkpoint"]) == "checkpoint_0000003.npz"


def test_data_parallel_stop_logs_the_loss_of_the_last_update(task, tmp_path):
    """Every rank stops after the update during which a rank saw SIGTERM; that update's loss is logged
    (and checked) like any other before its checkpoint is written."""
    from minitransformer.run import distributed

    class RankZeroOfTwo(distributed.LocalWorld):
        size = 2  # its partner adds nothing to the sums: enough to see where the ranks stop

    def terminate(trainer):
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # noted: the ranks stop after the next update
    trainer = Trainer(tiny_model(tok := task[0]), tok, task[1], None, training_config(steps=6, log_every=1), str(tmp_path),
                      [terminate], log=quiet, world=RankZeroOfTwo())
    summary = trainer.train()
    assert summary["stopped"] == "terminated" and summary["step"] == 3
    records = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3] and summary["last_loss"] == trainer.losses[3]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(xp_backend, task, tmp_path):
    tok, pairs, _ = task

    def poison(trainer):
        if trainer.step == 3:
            p = trainer.model.parameters()[0]
            p.data[...] = np.nan
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=8, save_every=2), str(tmp_path),
                      [poison], log=quiet)
    with pytest.raises(TrainingError, match=r"nan at step 4.*checkpoint_0000002\.npz"):
        trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]
    good = ckpt.load(tmp_path / "checkpoint_0000002.npz")
    assert all(np.isfinite(a).all() for a in good.model.values())


@pytest.mark.parametrize("lr_scale", [1e6, 1e7])
def test_divergence_stops_and_names_a_finite_checkpoint(task, tmp_path, lr_scale):
    """A huge rate makes the weights non-finite (1e6) or the loss huge but finite (1e7): either way the
    run stops, and the checkpoint it names holds only finite arrays (none is written after the blow-up)."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None,
                      training_config(steps=40, warmup_steps=1, lr_scale=lr_scale, save_every=1, keep=50),
                      str(tmp_path), log=quiet)
    with pytest.raises(TrainingError, match="training stopped") as info:
        trainer.train()
    named = [w for w in str(info.value).replace(";", " ").split() if w.endswith(".npz")]
    for path in named + list_checkpoints(str(tmp_path)):
        ck = ckpt.load(path)
        assert all(np.isfinite(a).all() for a in {**ck.model, **ck.optim}.values()), path


def test_no_checkpoint_is_written_with_non_finite_weights(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2), str(tmp_path), log=quiet)
    trainer.train()
    trainer.model.parameters()[0].data[0, 0] = np.nan                    # poisoned after the last save
    trainer.step += 1
    with pytest.raises(TrainingError, match=r"NaN or infinity .* the last good checkpoint is .*checkpoint_0000002\.npz"):
        trainer.save()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]


def test_final_save_comes_before_the_final_evaluation(task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, training_config(steps=2), str(tmp_path), log=quiet)
    trainer.evaluate = lambda: (_ for _ in ()).throw(RuntimeError("evaluation failed"))
    with pytest.raises(RuntimeError, match="evaluation failed"):
        trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == ["checkpoint_0000002.npz"]


def test_resume_refuses_a_checkpoint_past_the_steps_asked_for(task, tmp_path):
    """Resuming step 2 with steps=1 would train nothing and write step 2 again with the new settings."""
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2), str(tmp_path), log=quiet)
    trainer.train()
    saved = open(trainer.last_checkpoint, "rb").read()
    again = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match=r"is at step 2, past the 1 steps of this run: ask for 2 steps"):
        again.resume(trainer.last_checkpoint)
    assert again.step == 0 and open(trainer.last_checkpoint, "rb").read() == saved
    Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2), str(tmp_path),
            log=quiet).resume(trainer.last_checkpoint)


def test_resume_refuses_another_corpus_of_the_same_length_or_misaligned(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    first.train()
    shifted = [(src, tgt) for (src, _), (_, tgt) in zip(pairs, pairs[1:] + pairs[:1])]   # targets one line off
    other = [(tgt, src) for src, tgt in pairs]                                          # the other direction
    for corpus in (shifted, other):
        again = Trainer(tiny_model(tok), tok, corpus, None, training_config(steps=2), str(tmp_path), log=quiet)
        with pytest.raises(ckpt.CheckpointError, match=rf"checkpoint_0000001\.npz was trained on another corpus "
                                                       rf"\(as many pairs, {len(pairs):,}, but other sentences"):
            again.resume(first.last_checkpoint)
    fewer = Trainer(tiny_model(tok), tok, pairs[:-1], None, training_config(steps=2), str(tmp_path), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match=rf"another corpus \({len(pairs)} pairs there, {len(pairs) - 1:,}"):
        fewer.resume(first.last_checkpoint)


def test_resume_refuses_another_schedule_and_says_more_steps(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    first.train()
    other = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2, lr_scale=2.0, seed=5), str(tmp_path),
                    log=quiet)
    with pytest.raises(ckpt.CheckpointError, match=r"another schedule: lr_scale 1\.0 there, 2\.0 here, seed 0 there, "
                                                   r"5 here; resume with the same settings"):
        other.resume(first.last_checkpoint)
    said = []
    more = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=3), str(tmp_path), log=said.append)
    more.resume(first.last_checkpoint)
    assert more.step == 1 and any("steps=1, epochs=None with steps=3" in line for line in said), said


def test_crafted_resume_data_is_one_sentence_naming_the_file(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    first.train()
    good = ckpt.load(first.last_checkpoint)
    crafted = {"step": ("step", "1"), "optimizer": ("optimizer", [1, 2]),
               "steps": ("optimizer", {**good.meta["optimizer"], "steps": 10**30}),
               "betas": ("optimizer", {**good.meta["optimizer"], "betas": ["a", 0.9]}),
               "n_params": ("optimizer", {**good.meta["optimizer"], "n_params": 3}),
               "index": ("iterator", {**good.meta["iterator"], "index": -1}),
               "shuffle": ("iterator", {k: v for k, v in good.meta["iterator"].items() if k != "shuffle"}),
               "best_bleu": ("best_bleu", "high"), "training": ("training", None)}
    for name, (key, value) in crafted.items():
        path = tmp_path / f"crafted_{name}.npz"
        ckpt.save(path, good.model, {**good.meta, key: value}, good.optim)
        again = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2), None, log=quiet)
        with pytest.raises(ckpt.CheckpointError) as caught:
            again.resume(str(path))
        message = str(caught.value)
        assert message.startswith(f"{path} ") and "\n" not in message, message
        assert again.step == 0, name


def test_a_checkpoint_from_before_run_identities_is_resumed_with_a_word(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    first.train()
    good = ckpt.load(first.last_checkpoint)
    old = tmp_path / "old.npz"
    ckpt.save(old, good.model, {k: v for k, v in good.meta.items() if k != "identity"}, good.optim)
    said = []
    again = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=2), None, log=said.append)
    again.resume(str(old))
    assert again.step == 1 and sum("written before runs had an identity" in line for line in said) == 1


def test_an_update_of_more_batches_than_an_epoch_or_past_2_to_the_53_updates_is_refused_before_any_work(task):
    """An update plans its accum batches at once: more than an epoch holds would see pairs twice and hold
    the plans of many epochs; epochs so many that the step count passes 2**53 - 1 would overflow."""
    from minitransformer.checks import SettingError
    tok, pairs, _ = task
    batches = len(Trainer(tiny_model(tok), tok, pairs, None, training_config(), log=quiet).iterator)
    Trainer(tiny_model(tok), tok, pairs, None, training_config(accum=batches), log=quiet)   # a whole epoch: fine
    with pytest.raises(SettingError, match=rf"accum {batches + 1} asks for more batches per update than an epoch "
                                           rf"holds \({batches} of up to 120 tokens\)") as e:
        Trainer(tiny_model(tok), tok, pairs, None, training_config(accum=batches + 1), log=quiet)
    assert e.value.setting == "accum"
    with pytest.raises(SettingError, match=r"epochs 1e\+300 of \d+ batches make more than 9,007,199,254,740,991 "
                                           r"updates") as e:
        Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=None, epochs=1e300), log=quiet)
    assert e.value.setting == "epochs"
