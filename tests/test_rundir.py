"""rundir.py: the run directory keeps the last k step checkpoints and the best copy, lists only step
checkpoints, and refuses to resume with another tokenizer or over a later step's checkpoint. The folder is
the run's: one owner (run.lock), no link, FIFO or hard link planted as its lock or log written through or
waited on, a lost lock said, a path too long for its files named."""
import contextlib
import os
import re
import signal

import numpy as np
import pytest

from minitransformer.run import checkpoint as ckpt
from minitransformer.text.bpe import BPE
from minitransformer.run.rundir import RunDirectory, list_checkpoints
from minitransformer.run.training import Trainer

from conftest import quiet, tiny_model, training_config


def test_keeps_last_k_and_best(task, tmp_path):
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, training_config(steps=5, save_every=1, eval_every=2, keep=2),
                      str(tmp_path), log=quiet)
    trainer.train()
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == \
        ["checkpoint_0000004.npz", "checkpoint_0000005.npz"]
    best = ckpt.load(tmp_path / "checkpoint_best.npz")
    assert best.meta["best_bleu"] == trainer.best_bleu
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]  # no temporary file left


def test_the_best_copy_holds_the_weights_of_the_best_evaluation(task, tmp_path, monkeypatch):
    """Evaluating every 2 steps and saving every 4: the best copy is step 2's weights, not step 4's."""
    from minitransformer.run import translation
    tok, pairs, valid = task
    trainer = Trainer(tiny_model(tok), tok, pairs, valid, training_config(steps=6, eval_every=2, save_every=4, keep=5),
                      str(tmp_path), log=quiet)
    bleu = {2: 10.0, 4: 5.0, 6: 4.0}
    monkeypatch.setattr(translation, "evaluate", lambda *a, **k: {"bleu": bleu[trainer.step], "bleu_signature": ""})
    trainer.train()
    best, step_2 = ckpt.load(tmp_path / "checkpoint_best.npz"), ckpt.load(tmp_path / "checkpoint_0000002.npz")
    assert best.meta["step"] == 2 and best.meta["best_bleu"] == 10.0
    for k, a in step_2.model.items():
        np.testing.assert_array_equal(best.model[k], a, err_msg=k)


def test_list_checkpoints_skips_other_files_named_like_checkpoints(tmp_path):
    for name in ("checkpoint_0000002.npz", "checkpoint_avg_5.npz", "checkpoint_best.npz", "checkpoint_0000010.npz"):
        (tmp_path / name).write_bytes(b"")                     # checkpoint_avg_5.npz was an AttributeError
    assert [os.path.basename(p) for p in list_checkpoints(str(tmp_path))] == \
        ["checkpoint_0000002.npz", "checkpoint_0000010.npz"]


def test_run_directory_refuses_a_senseless_keep(tmp_path):
    for keep in (0, -1, None, 2.5):                           # keep=0 deleted each checkpoint it wrote
        with pytest.raises(ValueError, match="RunDirectory: keep must be an integer of at least 1"):
            RunDirectory(str(tmp_path), keep)


def test_resume_refuses_another_tokenizer(task, tmp_path):
    tok, pairs, _ = task
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    trainer.train()
    q = tok.offset + ord("q")
    other = BPE(list(tok.merges[:-1]) + [(q, q)])            # same vocabulary size, another last merge
    assert other.vocab_size == tok.vocab_size
    again = Trainer(tiny_model(tok), other, pairs, None, training_config(steps=2), str(tmp_path), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match="another tokenizer"):
        again.resume(trainer.last_checkpoint)


def test_resume_refuses_a_directory_with_later_checkpoints_and_keeps_other_files(task, tmp_path):
    tok, pairs, _ = task
    first = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=6, save_every=2, keep=5), str(tmp_path),
                    log=quiet)
    first.train()
    earlier = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=8, keep=1), str(tmp_path), log=quiet)
    earlier.resume(str(tmp_path / "checkpoint_0000002.npz"))
    log = open(tmp_path / "log.jsonl").read()
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint_0000006\.npz, a later step than 2"):
        earlier.train()
    assert len(list_checkpoints(str(tmp_path))) == 3                     # nothing deleted
    assert open(tmp_path / "log.jsonl").read() == log                   # not even a "start" line written
    # resuming the latest works, and pruning (keep=1) spares the files this run did not write
    latest = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=8, save_every=1, keep=1), str(tmp_path),
                     log=quiet)
    latest.resume(list_checkpoints(str(tmp_path))[-1])
    summary = latest.train()
    names = [os.path.basename(p) for p in list_checkpoints(str(tmp_path))]
    assert names == ["checkpoint_0000002.npz", "checkpoint_0000004.npz", "checkpoint_0000006.npz",
                     "checkpoint_0000008.npz"]
    assert os.path.exists(summary["checkpoint"])


HOLD = """import sys
from minitransformer.run.rundir import owning
with owning(sys.argv[1]):
    print("holding", flush=True)
    sys.stdin.read()                              # until the test closes the pipe (or kills this process)
"""


def hold_lock(out_dir):
    """A second process that holds out_dir's lock until its stdin is closed: (Popen)."""
    import subprocess
    import sys
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(out_dir)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "holding\n"
    return process


def test_a_second_run_into_a_live_runs_folder_is_refused_at_once_naming_the_first(task, tmp_path):
    import socket
    from minitransformer.run.pipeline import prepare_training
    tok, pairs, _ = task
    first = hold_lock(tmp_path)
    try:
        again = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
        busy = rf"{tmp_path} is in use by another run \(process {first.pid} on {socket.gethostname()} holds run.lock\)"
        with pytest.raises(ckpt.CheckpointError, match=busy):
            again.train()
        with pytest.raises(ckpt.CheckpointError, match=busy):   # a resume too, before the tokenizer is read
            prepare_training(["1 2"], ["3"], lambda v: tiny_model(tok).config, training_config(steps=1),
                             str(tmp_path), tokenizer=tok, resume="auto", log=quiet)
        assert sorted(os.listdir(tmp_path)) == ["run.lock"]   # nothing written, the holder's file untouched
    finally:
        first.communicate("")
    assert first.returncode == 0 and os.listdir(tmp_path) == []  # the holder removed its lock on leaving


def test_a_lock_left_by_a_killed_run_is_taken_over_and_said_once(task, tmp_path, capsys):
    import signal
    tok, pairs, _ = task
    dead = hold_lock(tmp_path)
    dead.send_signal(signal.SIGKILL)                             # no cleanup runs: run.lock stays, unlocked
    dead.wait()
    dead.stdin.close()
    dead.stdout.close()
    assert os.path.exists(tmp_path / "run.lock")
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path), log=quiet)
    assert trainer.train()["stopped"] == "done"
    err = capsys.readouterr().err
    assert err.count("taking over the lock") == 1 and f"of process {dead.pid} on " in err
    assert not os.path.exists(tmp_path / "run.lock")


def test_a_planted_symbolic_link_as_the_lock_is_refused(task, tmp_path):
    tok, pairs, _ = task
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.lock").symlink_to(victim)
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path / "run"), log=quiet)
    with pytest.raises(ckpt.CheckpointError, match=r"run\.lock is a symbolic link, not a file of a run"):
        trainer.train()
    assert victim.read_text() == "keep me"


def test_a_planted_log_link_out_of_the_folder_is_not_appended_to(task, tmp_path):
    from minitransformer.checks import FileError
    tok, pairs, _ = task
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "log.jsonl").symlink_to(victim)
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(tmp_path / "run"), log=quiet)
    with pytest.raises(FileError, match=r"log\.jsonl is a symbolic link to .*victim\.txt, outside its folder"):
        trainer.train()
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("left", [["checkpoint_best.npz"], ["tokenizer.json"], ["log.jsonl"],
                                  ["checkpoint_0000004.npz", "tokenizer.json"]])
def test_a_new_run_refuses_any_file_an_earlier_run_left(tmp_path, left):
    """After the advised move of the step checkpoints, the best copy and the tokenizer are still there:
    a fresh run would replace them without a word."""
    from minitransformer.run.rundir import check_new_run
    for name in left:
        (tmp_path / name).write_bytes(b"an earlier run's")
    with pytest.raises(ckpt.CheckpointError, match=rf"--out {tmp_path} already holds {left[0]} of an earlier run"):
        check_new_run(str(tmp_path), "--out", tokenizer="tokenizer.json")
    if left == ["tokenizer.json"]:                                   # a run given --tokenizer writes none
        check_new_run(str(tmp_path), "--out", tokenizer=None)
    check_new_run(str(tmp_path / "fresh"), "--out", tokenizer="tokenizer.json")


@contextlib.contextmanager
def no_hang(seconds=60):
    """A TimeoutError if the block still runs after `seconds` (a hang fails the test, never blocks it)."""
    def hung(signum, frame):
        raise TimeoutError(f"still waiting after {seconds} s")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", ["fifo", "hard link"])
@pytest.mark.parametrize("name", ["run.lock", "log.jsonl"])
def test_a_planted_fifo_or_hard_link_as_lock_or_log_is_refused_never_waited_on_nor_written(task, tmp_path, name,
                                                                                          kind):
    tok, pairs, _ = task
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"                      # outside the folder: a hard link would write it
    victim.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(run / name)                            # open for writing: waits for a reader for ever
    else:
        os.link(victim, run / name)
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=1), str(run), log=quiet)
    what = r"is not a regular file \(a FIFO" if kind == "fifo" else r"has 2 names \(hard links\)"
    with no_hang(), pytest.raises(ckpt.CheckpointError, match=re.escape(name) + " " + what):
        trainer.train()
    assert victim.read_text() == "keep me" and sorted(os.listdir(run)) == [name]   # nothing written there


def test_a_lost_lock_is_said_once_taken_again_and_the_run_ends_with_its_checkpoint(task, tmp_path, capsys):
    tok, pairs, _ = task

    def lose(trainer):
        if trainer.step == 2:
            os.remove(tmp_path / "run.lock")              # another run could now start here
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=4, save_every=1), str(tmp_path),
                      [lose], log=quiet)
    summary = trainer.train()
    assert summary["stopped"] == "done" and ckpt.load(summary["checkpoint"]).step == 4
    err = capsys.readouterr().err
    assert err.count("run.lock was removed or replaced while this run held it") == 1, err
    assert not (tmp_path / "run.lock").exists()           # the lock taken again, removed on leaving


def test_a_lock_replaced_by_another_run_is_said_and_left_to_it(task, tmp_path, capsys):
    tok, pairs, _ = task
    other = []

    def lose(trainer):
        if trainer.step == 2:
            os.remove(tmp_path / "run.lock")
            other.append(hold_lock(tmp_path))             # a second run takes the folder
    trainer = Trainer(tiny_model(tok), tok, pairs, None, training_config(steps=4, save_every=1), str(tmp_path),
                      [lose], log=quiet)
    try:
        summary = trainer.train()
        assert summary["stopped"] == "done" and ckpt.load(summary["checkpoint"]).step == 4
        err = capsys.readouterr().err
        assert err.count("run.lock was removed or replaced while this run held it") == 1, err
        assert (tmp_path / "run.lock").read_text().split()[0] == str(other[0].pid)   # its lock, left to it
    finally:
        for process in other:
            process.communicate("")


def test_a_path_too_long_for_a_runs_files_is_named_before_anything_is_made(tmp_path):
    from minitransformer.run.rundir import check_run_path, owning
    long_name = tmp_path / ("a" * 256)
    deep = tmp_path.joinpath(*["b" * 200] * 21)           # each part fits, the whole does not
    with pytest.raises(ckpt.CheckpointError, match=r"--out .*: the name a+\.\.\.a+ of it is 256 bytes long, more than the 255"):
        check_run_path(str(long_name), "--out")
    with pytest.raises(ckpt.CheckpointError, match=r"--out .* is a path of 4,\d{3} bytes: with the names of a run"):
        check_run_path(str(deep), "--out")
    with pytest.raises(ckpt.CheckpointError, match="the run folder"), owning(str(deep)):
        pass
    assert os.listdir(tmp_path) == []                     # no folder made on the way
    check_run_path(str(tmp_path.joinpath(*["c" * 200] * 15)), "--out")
