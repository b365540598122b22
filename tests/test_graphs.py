"""graphs.py, training steps replayed as CUDA graphs (TrainingConfig(cuda_graphs=True)).

Everywhere: what cannot replay is refused before any work (the CPU, several ranks, accumulation,
clipping, a setting that is not a bool); what a recording holds, run eagerly on NumPy, gives the plain
step's bits, and refuses a parameter the loss never reaches; the Trainer's cuda_graphs branch, driving
that body on NumPy, gives the plain run's bits and resumes exactly. On a GPU (the `gpu` marker; skipped elsewhere, with the
reason): a run with graphs gives the eager run's losses and weights to the last bit, every shape
recorded on its second sight and replayed from its third; resuming a run with graphs repeats the
uninterrupted one; a step that cannot be recorded runs eagerly, said once; a parameter that the loss
never reaches is refused; cublas.matmul (the GEMM the graphs record) equals CuPy's matmul on the
layouts the model makes.
"""
import types

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.fast import cublas, kernels
from minitransformer.run import training
from minitransformer.checks import SettingError
from minitransformer.text.data import BatchIterator
from minitransformer.run.replay import INPUTS, StepGraphs
from minitransformer.optim import Adam
from minitransformer.run.training import Trainer, step_seed

from conftest import f32_tol, quiet, tiny_model, training_config

HAVE_GPU = backend.gpu_available()


def gpu(test):
    """Mark a test `gpu` and skip it, saying why, where CuPy or a CUDA GPU is absent."""
    return pytest.mark.gpu(pytest.mark.skipif(not HAVE_GPU, reason="CUDA graphs: CuPy or a CUDA GPU is not available here")(test))


@pytest.mark.parametrize("kw, named", [({"accum": 2}, "accum=2"), ({"clip_norm": 1.0}, "clip_norm=1.0"),
                                       ({"cuda_graphs": "yes"}, "cuda_graphs must be True or False")])
def test_settings_a_replay_cannot_follow_are_refused(kw, named):
    with pytest.raises(SettingError, match=named):
        training_config(**{"cuda_graphs": True, **kw})


def test_the_cpu_and_several_ranks_are_refused_before_any_work(task, on_cpu):
    tok, pairs, _ = task
    with pytest.raises(ValueError, match="cuda_graphs needs the GPU .* this run is on the CPU"):
        Trainer(tiny_model(tok), tok, pairs, None, training_config(cuda_graphs=True), log=quiet)
    model = tiny_model(tok)
    with pytest.raises(ValueError, match="needs the GPU"):
        StepGraphs(model, Adam(model.parameters()))
    if HAVE_GPU:
        mt.use("gpu")
        with pytest.raises(ValueError, match="2 ranks here"):
            StepGraphs.check(2)


def numpy_adam_from(p, g, m, v, s):
    """kernels.adam_from in NumPy, in the kernel's (and Adam._update's) order, s its seven numbers."""
    m *= s[0]
    m += g * s[1]
    v *= s[2]
    v += g * g * s[3]
    p *= s[6]
    p += m / (np.sqrt(v) + s[4]) * s[5]


def test_the_recorded_body_run_on_numpy_gives_the_eager_steps_bits(task, on_cpu, monkeypatch):
    """What a recording holds, StepGraphs._adam_numbers then _body, run eagerly on NumPy (a stand-in for
    the GPU object: no stream, NumPy arrays, kernels.adam_from in NumPy): the plain step's losses and
    weights to the last bit, four steps over two batch shapes. The GPU adds only the recording."""
    tok, pairs, _ = task
    batches = [b for b in BatchIterator(pairs[:60], 400, 0, 1, 2, seed=0).epoch_batches()] * 2

    def model_and_adam():
        model = tiny_model(tok)
        return model, Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    plain, plain_opt = model_and_adam()
    plain_losses = []
    for i, b in enumerate(batches, 1):
        backend.seed(step_seed(0, i))
        loss = plain.loss(b.src, b.tgt_in, b.tgt_out, b.src_mask, b.tgt_mask)
        plain_opt.zero_grad()
        loss.backward()
        plain_opt.step(lr=1e-3 * i)
        plain_losses.append(loss.item())
    monkeypatch.setattr(kernels, "adam_from", numpy_adam_from)
    model, opt = model_and_adam()
    body = types.SimpleNamespace(model=model, opt=opt, numbers={np.dtype(np.float32): np.zeros(7, np.float32)})
    losses = []
    for i, b in enumerate(batches, 1):
        backend.seed(step_seed(0, i))
        loss = np.zeros((), np.float32)
        StepGraphs._adam_numbers(body, 1e-3 * i)
        StepGraphs._body(body, [getattr(b, name) for name in INPUTS], loss, check=i == 1)
        losses.append(loss.item())
    assert losses == plain_losses and opt.t == plain_opt.t and opt.steps == plain_opt.steps == 4
    for (k, a), (_, w) in zip(plain.state_dict().items(), model.state_dict().items()):
        np.testing.assert_array_equal(w, a, err_msg=k)
    model.unused = mt.nn.Linear(2, 2)                          # in parameters(), never in the loss
    opt = Adam(model.parameters())
    body = types.SimpleNamespace(model=model, opt=opt, numbers={np.dtype(np.float32): np.zeros(7, np.float32)})
    with pytest.raises(ValueError, match=r"parameters \[\d+, \d+\] take no part in the loss"):
        StepGraphs._body(body, [getattr(batches[0], name) for name in INPUTS], np.zeros((), np.float32), check=True)


class NumpySteps:
    """StepGraphs as the Trainer drives it, its body run eagerly on NumPy (the GPU's recording aside)."""
    check = staticmethod(lambda ranks: None)
    made = []

    def __init__(self, model, optimizer, on_failure=None):
        self.model, self.opt, self.closed, self.steps = model, optimizer, False, 0
        self.numbers = {dtype: np.zeros(7, dtype) for dtype in optimizer.flat}
        NumpySteps.made.append(self)

    def step(self, batch, lr):
        backend.rng()
        StepGraphs._adam_numbers(self, lr)
        loss = np.zeros((), np.float32)
        StepGraphs._body(self, [getattr(batch, name) for name in INPUTS], loss, check=not self.steps)
        self.steps += 1
        return loss

    def close(self):
        self.closed = True


def test_the_trainer_with_graphs_on_numpy_gives_the_plain_runs_bits_and_resumes(task, on_cpu, tmp_path, monkeypatch):
    """The Trainer's cuda_graphs branch (one batch an update, Adam inside the step, the graphs closed at the
    end, even when interrupted), with NumpySteps for StepGraphs: the plain run's losses and weights to the
    last bit, and a run cut at step 5 and resumed repeats the uninterrupted one."""
    tok, pairs, _ = task
    monkeypatch.setattr(kernels, "adam_from", numpy_adam_from)
    NumpySteps.made.clear()

    def run(graphs, out, callbacks=(), resume=None):
        cfg = training_config(steps=8, max_tokens=400, save_every=5, cuda_graphs=graphs)
        trainer = Trainer(tiny_model(tok, seed=99 if resume else 0), tok, pairs[:60], None, cfg, str(out),
                          list(callbacks), log=quiet)
        if resume:
            trainer.resume(resume)
        trainer.train()
        return trainer
    plain = run(False, tmp_path / "plain")
    monkeypatch.setattr(training, "StepGraphs", NumpySteps)
    full = run(True, tmp_path / "full")
    assert [full.losses[s] for s in range(1, 9)] == [plain.losses[s] for s in range(1, 9)]
    for (k, a), (_, b) in zip(plain.model.state_dict().items(), full.model.state_dict().items()):
        np.testing.assert_array_equal(b, a, err_msg=k)

    def interrupt(trainer):
        if trainer.step == 5:
            raise KeyboardInterrupt
    cut = run(True, tmp_path / "cut", [interrupt])
    again = run(True, tmp_path / "cut", resume=str(tmp_path / "cut" / "checkpoint_0000005.npz"))
    assert [{**cut.losses, **again.losses}[s] for s in range(1, 9)] == [full.losses[s] for s in range(1, 9)]
    assert all(steps.closed for steps in NumpySteps.made) and len(NumpySteps.made) == 3
    assert full.graphs is None and again.graphs is None


def test_a_failed_recording_keeps_the_graphs_before_it_and_a_failed_replay_drops_them(on_cpu):
    """StepGraphs._record and _fail with a stand-in for the stream's capture: a recording that raises (out
    of memory for one more graph, say) keeps the shapes recorded, stops recording, says so once; a replay
    that fails drops every graph."""
    class Capture:
        begin_capture = staticmethod(lambda: None)
        end_capture = staticmethod(lambda: "a graph")
    said = []
    steps = object.__new__(StepGraphs)
    steps.stream, steps.graphs, steps.failed, steps.on_failure = Capture(), {}, None, said.append
    steps.counts = {"eager": 0, "recorded": 0, "replayed": 0}
    steps._body = lambda inputs, loss: None
    steps._record("shape 1", [np.zeros(3, np.float32)])
    assert list(steps.graphs) == ["shape 1"] and steps.failed is None and not said

    def out_of_memory(inputs, loss):
        raise MemoryError("out of memory allocating 2,000,000,000 bytes")
    steps._body = out_of_memory
    steps._record("shape 2", [np.zeros(3, np.float32)])
    assert list(steps.graphs) == ["shape 1"] and steps.counts["recorded"] == 1
    assert said == ["cuda_graphs: recording: MemoryError: out of memory allocating 2,000,000,000 bytes; the graphs "
                    "of the 1 batch shape recorded go on replaying, every other step runs eagerly from here"]
    steps._fail("a replay: CUDARuntimeError: cudaErrorInvalidValue", keep=False)
    assert steps.graphs == {} and said[1].endswith("; every step runs eagerly from here")


# ==================================================================== on a GPU
def run(task, tmp_path=None, graphs=True, steps=12, callbacks=(), model_seed=0, resume=None, log=quiet):
    """A tiny run on the GPU: 12 updates over the task's two batch shapes (each seen 6 times)."""
    tok, pairs, _ = task
    mt.use("gpu")
    cfg = training_config(steps=steps, max_tokens=400, save_every=4 if tmp_path else 0, cuda_graphs=graphs)
    trainer = Trainer(tiny_model(tok, seed=model_seed), tok, pairs[:60], None, cfg,
                      None if tmp_path is None else str(tmp_path), list(callbacks), log=log)
    if resume:
        trainer.resume(resume)
    seen = {}
    trainer.callbacks.append(lambda t: seen.update(t.graphs.counts) if t.graphs else None)
    trainer.train()
    return trainer, seen


@gpu
def test_replayed_steps_give_the_eager_steps_bits(task, monkeypatch):
    monkeypatch.setattr(backend, "gemm", cublas.matmul)          # the eager run's GEMMs: the same cuBLAS calls
    eager, _ = run(task, graphs=False)
    monkeypatch.setattr(backend, "gemm", None)
    with_graphs, counts = run(task)
    assert backend.gemm is None                                 # given back to CuPy after the run
    assert counts["replayed"] >= 4 and counts["recorded"] >= 1 and counts["eager"] + counts["replayed"] == 12
    assert [with_graphs.losses[s] for s in range(1, 13)] == [eager.losses[s] for s in range(1, 13)]
    for (k, a), (_, b) in zip(eager.model.state_dict().items(), with_graphs.model.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)
    assert with_graphs.optimizer.t == eager.optimizer.t and with_graphs.optimizer.steps == 12


@gpu
def test_a_run_with_graphs_resumes_exactly(task, tmp_path):
    full, _ = run(task, tmp_path / "full")

    def interrupt(trainer):
        if trainer.step == 8:
            raise KeyboardInterrupt
    first, _ = run(task, tmp_path / "cut", callbacks=[interrupt])
    again, counts = run(task, tmp_path / "cut", model_seed=99, resume=str(tmp_path / "cut" / "checkpoint_0000008.npz"))
    resumed = {**first.losses, **again.losses}
    assert [resumed[s] for s in range(1, 13)] == [full.losses[s] for s in range(1, 13)]
    for (k, a), (_, b) in zip(full.model.state_dict().items(), again.model.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)


@gpu
def test_a_step_that_cannot_be_recorded_runs_eagerly_and_says_so_once(task, monkeypatch):
    body = StepGraphs._body

    def waiting_body(self, inputs, loss_out, check=False):
        body(self, inputs, loss_out, check)
        backend.to_numpy(loss_out)                             # a wait for the GPU: refused while recording
    monkeypatch.setattr(StepGraphs, "_body", waiting_body)
    said = []
    trainer, counts = run(task, log=said.append)
    assert counts["eager"] == 12 and counts["recorded"] == counts["replayed"] == 0
    assert len(said) == 1 and said[0].startswith("cuda_graphs: recording: ") and "runs eagerly" in said[0]
    assert all(np.isfinite(trainer.losses[s]) for s in range(1, 13))


@gpu
def test_a_parameter_the_loss_never_reaches_is_refused(task):
    tok, pairs, _ = task
    mt.use("gpu")
    model = tiny_model(tok)
    model.unused = mt.nn.Linear(2, 2)                          # in parameters(), never in the loss
    trainer = Trainer(model, tok, pairs[:60], None, training_config(cuda_graphs=True, max_tokens=400), log=quiet)
    with pytest.raises(ValueError, match="take no part in the loss"):
        trainer.train()
    assert backend.gemm is None


@gpu
@pytest.mark.parametrize("a_shape, b_shape, how", [((7, 5), (5, 3), "C"), ((4, 7, 5), (5, 3), "C"),
                                                   ((2, 3, 7, 5), (2, 3, 5, 4), "C"), ((7, 5), (5, 3), "T"),
                                                   ((2, 3, 7, 5), (2, 3, 5, 4), "T"), ((64, 48), (48, 80), "sliced")])
def test_cublas_matmul_equals_cupys(a_shape, b_shape, how):
    mt.use("gpu")
    xp, rng = backend.xp, np.random.default_rng(0)
    a = xp.asarray(rng.standard_normal(a_shape).astype(np.float32))
    b = xp.asarray(rng.standard_normal(b_shape).astype(np.float32))
    if how == "T":                                              # transposed views of C-ordered arrays
        a = xp.ascontiguousarray(xp.swapaxes(a, -1, -2)).swapaxes(-1, -2)
        b = xp.ascontiguousarray(xp.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    if how == "sliced":                                         # rows further apart than their length
        a = xp.asarray(rng.standard_normal((64, 60)).astype(np.float32))[:, 5:53]
    got, want = cublas.matmul(a, b), xp.matmul(a, b)
    atol = f32_tol(a.shape[-1], float(xp.abs(want).max()))
    np.testing.assert_allclose(backend.to_numpy(got), backend.to_numpy(want), rtol=0, atol=atol)
    zeros = xp.zeros_like(got)                                  # add=True: the GEMM adds into out (beta 1)
    assert cublas.matmul(a, b, zeros, add=True) is zeros
    np.testing.assert_array_equal(backend.to_numpy(zeros), backend.to_numpy(got))   # into zeros: the same bits
    start = xp.asarray(rng.standard_normal(got.shape).astype(np.float32))
    for out in (start.copy(), xp.asfortranarray(start)):        # C-ordered (cuBLAS adds), or not (added after)
        cublas.matmul(a, b, out, add=True)
        np.testing.assert_allclose(backend.to_numpy(out), backend.to_numpy(start + want), rtol=0,
                                   atol=atol + f32_tol(1, float(xp.abs(start).max() + xp.abs(want).max())))
