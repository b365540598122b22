"""Signals cannot lose work (host.StopSignals, the Trainer, the command line): from the first Ctrl-C or
SIGTERM to the end of the checkpoint it asks for, every further signal is noted, never acted on. Two and
three signals land at every phase (the forward pass, Adam's update, a periodic save, an evaluation, the
final save), one rank and rank threads: a loadable checkpoint always remains, and resuming it gives the very
losses and weights of a run never interrupted. Then the same from outside, on `python -m minitransformer
train`, and Ctrl-C while the command line's modules load."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.run import checkpoint as ckpt
from minitransformer.run import distributed, host, translation
from minitransformer.run.training import Trainer

from conftest import quiet, tiny_model, training_config

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sends signals")
ROOT = Path(__file__).resolve().parents[1]
# steps 6; a periodic save at 2 and 4, an evaluation at 3 (and at the end)
SETTINGS = dict(steps=6, save_every=2, eval_every=3, eval_sentences=4)
# (the phase the first signal lands in, the step it lands at)
PHASES = {"forward": 2, "update": 2, "save": 2, "evaluation": 3, "final-save": 6}
# two signals (a user pressing Ctrl-C again), three (SIGTERM, then Ctrl-C twice)
SIGNALS = {2: [signal.SIGINT, signal.SIGINT], 3: [signal.SIGTERM, signal.SIGINT, signal.SIGINT]}


class Landings:
    """Sends `signums` to this process: the first where the run reaches `phase` at `step` (rank 0,
    the main thread, which alone handles signals), each later one inside a checkpoint's write (before
    its data, then after it), where a signal acted on would lose the checkpoint."""

    def __init__(self, phase, step, signums):
        self.phase = phase
        self.step = step
        self.left = list(signums)

    def reached(self, phase, step):
        if distributed.world().rank != 0 or not self.left:
            return
        started = len(self.left) < self.sent_total
        if (started and phase == "write") or (not started and (phase, step) == (self.phase, self.step)):
            os.kill(os.getpid(), self.left.pop(0))

    def hook(self, trainer, monkeypatch):
        self.sent_total = len(self.left)
        loss = trainer.model.loss
        update = trainer.optimizer._update
        evaluate = translation.evaluate
        savez = np.savez

        def loss_landing(*args, **kw):
            self.reached("forward", trainer.step + 1)
            return loss(*args, **kw)

        def update_landing(*arrays):  # once the weights of this piece are written: an update half done
            update(*arrays)
            self.reached("update", trainer.step + 1)

        def evaluate_landing(*args, **kw):
            self.reached("evaluation", trainer.step)
            return evaluate(*args, **kw)

        def savez_landing(f, **arrays):  # inside atomic_write: the temporary half written
            self.reached("save" if trainer.step < 6 else "final-save", trainer.step)
            self.reached("write", trainer.step)
            savez(f, **arrays)
            self.reached("write", trainer.step)
        trainer.model.loss = loss_landing
        trainer.optimizer._update = update_landing
        monkeypatch.setattr(translation, "evaluate", evaluate_landing)
        monkeypatch.setattr(np, "savez", savez_landing)


def trainer_of(task, out, seed=0):
    tok, pairs, valid = task
    return Trainer(tiny_model(tok, seed=seed), tok, pairs, valid, training_config(**SETTINGS), str(out),
                   log=quiet)


def run_ranks(ranks, main):
    """main() -> a result, as `ranks` rank threads (run_threads) or in this thread; rank 0's result."""
    if ranks == 1:
        return main()
    results = {}

    def rank():
        results[distributed.world().rank] = main()
    assert distributed.run_threads(rank, (), ranks) == 0
    return results[0]


def final_state(trainer):
    return {k: backend.to_numpy(v).copy() for k, v in trainer.model.state_dict().items()}


@pytest.fixture(scope="module")
def uninterrupted(task, tmp_path_factory):
    """ranks -> (losses, final weights) of the run never interrupted."""
    done = {}
    for ranks in (1, 2):
        def main():
            trainer = trainer_of(task, tmp_path_factory.mktemp(f"full{ranks}"))
            assert trainer.train()["stopped"] == "done"
            return dict(trainer.losses), final_state(trainer)
        done[ranks] = run_ranks(ranks, main)
    return done


@pytest.mark.parametrize("ranks", [1, 2], ids=["one-rank", "rank-threads"])
@pytest.mark.parametrize("count", sorted(SIGNALS), ids=lambda n: f"{n}-signals")
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_further_signals_never_lose_the_checkpoint_and_the_resume_is_exact(task, tmp_path, monkeypatch,
                                                                          uninterrupted, phase, count, ranks):
    landings = Landings(phase, PHASES[phase], SIGNALS[count])

    def cut():
        trainer = trainer_of(task, tmp_path)
        if distributed.world().rank == 0:
            landings.hook(trainer, monkeypatch)
        summary = trainer.train()
        return summary, dict(trainer.losses)
    summary, losses = run_ranks(ranks, cut)
    monkeypatch.undo()
    assert landings.left == [], f"signals never sent: {landings.left}"    # every landing was reached
    assert summary["stopped"] == ("terminated" if SIGNALS[count][0] == signal.SIGTERM else "interrupted")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers put back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    saved = ckpt.load(summary["checkpoint"])                               # whole, and of the step reached
    assert saved.step == summary["step"] and sorted(losses) == list(range(1, summary["step"] + 1))
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]

    def resume():
        trainer = trainer_of(task, tmp_path, seed=99)
        trainer.resume(summary["checkpoint"])
        assert trainer.train()["stopped"] == "done"
        return dict(trainer.losses), final_state(trainer)
    again, weights = run_ranks(ranks, resume)
    full_losses, full_weights = uninterrupted[ranks]
    assert {**losses, **again} == full_losses                              # CPU: bit for bit
    for k in full_weights:
        np.testing.assert_array_equal(weights[k], full_weights[k], err_msg=k)


def test_a_signal_inside_a_whole_block_waits_for_its_end():
    """StopSignals alone: the first signal raises at once outside whole(), is noted inside it (and raised
    at stop_if_noted), and once stopping every further one is only noted."""
    signals = host.StopSignals().catch()
    try:
        with signals.whole():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0)                                                  # a bytecode boundary: the handler ran
        assert signals.seen == [0, 1] and not signals.stopping
        with pytest.raises(host.Terminated):
            signals.stop_if_noted()
        assert signals.stopping
        os.kill(os.getpid(), signal.SIGINT)                                # noted, not raised
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0)
        assert signals.seen == [1, 1]
    finally:
        signals.release()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------- from outside: the command line
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Training files, a tokenizer learned once, a tiny model config."""
    from minitransformer.text.bpe import BPE
    from minitransformer.text.demo_task import make_splits
    d = tmp_path_factory.mktemp("signals")
    (src, tgt), _, _ = make_splits(200, 10, 0, seed=5, max_numbers=2, max_digits=2)
    (d / "train.src").write_text("\n".join(src) + "\n", encoding="utf-8")
    (d / "train.tgt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    BPE.train(src + tgt, 300).save(str(d / "tok.json"))
    (d / "config.json").write_text(json.dumps({"preset": "tiny", "d_model": 32, "d_ff": 64, "n_heads": 2,
                                               "n_layers": 1}))
    return d


def train_command(d, out, steps, *extra):
    return [sys.executable, "-m", "minitransformer", "train", "--config", str(d / "config.json"),
            "--train-src", str(d / "train.src"), "--train-tgt", str(d / "train.tgt"), "--tokenizer",
            str(d / "tok.json"), "--out", str(out), "--max-tokens", "200", "--warmup", "5", "--save-every", "0",
            "--eval-every", "0", "--steps", str(steps), "--no-progress", *extra]


def step_losses(out):
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
            if "loss" in r and "event" not in r}


def environment():
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


@pytest.mark.parametrize("ranks, signums", [(1, [signal.SIGINT] * 2), (2, [signal.SIGTERM] * 3)],
                         ids=["one-rank-Ctrl-C-twice", "rank-threads-SIGTERM-three-times"])
def test_signals_in_quick_succession_to_train_keep_a_checkpoint_that_resumes_exactly(corpus, tmp_path, ranks,
                                                                                    signums):
    """`--save-every 0`: the only checkpoint is the one the signal asks for. The signals come 20 ms
    apart once the run trains, wherever they land: exit 130 (143), one line, no traceback, a checkpoint
    whose resume continues the losses of a run never stopped."""
    out = tmp_path / "cut"
    proc = subprocess.Popen(train_command(corpus, out, 100000, "--ranks", str(ranks)), env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not ((out / "log.jsonl").exists() and step_losses(out)):
            time.sleep(0.1)                                    # until it trains (a polling wait, not a timed assert)
        for signum in signums:
            proc.send_signal(signum)
            time.sleep(0.02)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == host.exit_code(host.stop_for(signums[0])), err
    assert "Traceback" not in err and err.count("checkpoint saved:") == 1, err
    (saved,) = out.glob("checkpoint_*.npz")
    step = ckpt.load(str(saved)).step
    resumed = subprocess.run(train_command(corpus, out, step + 2, "--ranks", str(ranks), "--resume", "auto"),
                             env=environment(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    full = subprocess.run(train_command(corpus, tmp_path / "full", step + 2, "--ranks", str(ranks)),
                          env=environment(), capture_output=True, text=True, timeout=120)
    assert full.returncode == 0, full.stderr
    assert step_losses(out) == step_losses(tmp_path / "full")             # every step, 1 to step + 2


# Ctrl-C while `python -m minitransformer` loads: the signal is sent as a module is imported (a finder
# asked for it first), as runpy does for -m
LOADING = """
import os, runpy, signal, sys
module = sys.argv[1]
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["-m", "--help"]
runpy._run_module_as_main("minitransformer")
"""
QUIET_PACKAGE = "quiet_loading" in (ROOT / "minitransformer" / "__init__.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("module", [
    "minitransformer.cli.train",                               # the command line's modules (__main__.py)
    pytest.param("numpy", marks=pytest.mark.skipif(not QUIET_PACKAGE, reason="minitransformer/__init__.py "
                                                   "does not call host.quiet_loading() first"))])
def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_130(module):
    run = subprocess.run([sys.executable, "-c", LOADING, module], env=environment(), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 130 and run.stdout == "", run.stderr
    assert run.stderr == "python -m minitransformer: interrupted\n"


QUIET = """
import os, signal, sys, time
sys.argv = ["-m"]                         # as while `python -m minitransformer` loads the package
from minitransformer.run import host
host.quiet_loading()
os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL"]))
time.sleep(60)
"""


@pytest.mark.parametrize("name, code, what", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")])
def test_a_signal_while_the_package_loads_is_one_line_when_quiet_loading_is_set(name, code, what):
    """host.quiet_loading, called first thing as the package loads under `python -m` (sys.argv[0] is "-m"):
    Ctrl-C (SIGTERM) then ends the process at once with one line and exit 130 (143), never a traceback of
    the import under way; __main__.py then handles both."""
    run = subprocess.run([sys.executable, "-c", QUIET], env={**environment(), "SIGNAL": name},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == code and run.stderr == f"python -m minitransformer: {what}\n", run.stderr
