"""The backend switch: use(), the environment variable, to_numpy, seeding, and the GPU error."""
import os
import subprocess
import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.run import host


def test_default_is_numpy_float32():
    mt.use("cpu")
    assert backend.xp is np and backend.device == "cpu"
    assert mt.tensor([1.0]).dtype == np.float32
    assert mt.tensor(np.zeros(2)).dtype == np.float64      # arrays keep their dtype
    assert mt.tensor([1, 2]).dtype.kind == "i"


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="expected 'cpu' or 'gpu'"):
        mt.use("tpu")


def test_gpu_request_without_cupy_or_gpu_says_what_is_missing():
    if backend.gpu_available():
        pytest.skip("a GPU is available here, so the error cannot be provoked")
    with pytest.raises(RuntimeError, match="CuPy|GPU") as e:
        mt.use("gpu")
    message = str(e.value)
    assert ("gpu-cuda12" in message and "gpu-cuda13" in message) or "no CUDA GPU" in message, message
    assert backend.device == "cpu"                          # a failed switch changes nothing


class _FakeRuntime:
    """cupy.cuda.runtime of a machine whose driver fails (raises) or that shows no GPU (0)."""
    def __init__(self, devices):
        self.devices = devices

    def getDeviceCount(self):
        if isinstance(self.devices, Exception):
            raise self.devices
        return self.devices


@pytest.mark.parametrize("runtime, said", [
    (None, r"needs CuPy, which is not installed .*gpu-cuda12.*gpu-cuda13"),
    (_FakeRuntime(RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")),
     r"no CUDA GPU is usable \(cudaErrorInsufficientDriver: .*\)\. .*gpu-cuda12.*gpu-cuda13"),
    (_FakeRuntime(0), r"no CUDA GPU is visible \(CUDA_VISIBLE_DEVICES\?\)"),
], ids=["no-cupy", "a-driver-that-fails", "no-gpu-seen"])
def test_each_way_a_gpu_is_missing_is_said_with_the_cpu_as_a_way_on(monkeypatch, runtime, said):
    """No CuPy, CuPy without a working driver, CuPy that sees no GPU: each is made here (None in
    sys.modules fails the import; a stand-in module for the others), so every machine tests all
    three."""
    cupy = None
    if runtime is not None:
        cupy = type(sys)("cupy")
        cupy.cuda = type(sys)("cupy.cuda")
        cupy.cuda.runtime = runtime
    before = backend.device, backend.xp                 # the GPU's, on a GPU machine's suite
    monkeypatch.setattr(backend, "_cupy", None)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    with pytest.raises(RuntimeError, match=said) as e:
        mt.use("gpu")
    assert str(e.value).endswith("stay on the CPU with use('cpu')."), str(e.value)
    assert (backend.device, backend.xp) == before           # a failed switch changes nothing


def test_environment_variable_selects_the_device():
    code = "import minitransformer as mt; print(mt.backend.device)"
    env = dict(os.environ, MINITRANSFORMER_DEVICE="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "cpu"
    if not backend.gpu_available():
        env["MINITRANSFORMER_DEVICE"] = "gpu"
        bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert bad.returncode != 0 and ("gpu-cuda12" in bad.stderr or "no CUDA GPU" in bad.stderr), bad.stderr


def test_to_numpy_and_device_of(xp_backend):
    a = xp_backend.arange(3, dtype=np.float32)
    assert backend.device_of(a) == backend.device
    h = mt.to_numpy(a)
    assert isinstance(h, np.ndarray) and h.tolist() == [0.0, 1.0, 2.0]


def test_seeding_makes_runs_repeatable(xp_backend):
    mt.seed(123)
    a = backend.to_numpy(backend.rng().random(5, dtype=np.float32)), backend.host_rng().standard_normal(3)
    mt.seed(123)
    b = backend.to_numpy(backend.rng().random(5, dtype=np.float32)), backend.host_rng().standard_normal(3)
    mt.seed(124)
    c = backend.host_rng().standard_normal(3)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c)


def test_scatter_add_adds_repeated_indices(xp_backend):
    target = xp_backend.zeros(3, dtype=np.float32)
    backend.scatter_add(target, xp_backend.asarray([0, 0, 2]), xp_backend.asarray([1.0, 1.0, 5.0], dtype=np.float32))
    assert mt.to_numpy(target).tolist() == [2.0, 0.0, 5.0]


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS_SCRIPT = """
import resource, sys
import numpy as np
from minitransformer.run import host
kept = host.keep_freed_memory() if sys.argv[1] == "keep" else None
def cycle():
    a = np.ones(12_000_000, np.float32)   # 48 MB, over glibc's largest mmap threshold: written, then freed
    del a
cycle(); cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or __import__("platform").libc_ver()[0] != "glibc",
                    reason="keep_freed_memory acts on glibc's malloc (Linux) only")
def test_freed_memory_is_kept_for_the_next_array():
    """20 arrays of 48 MB made and freed in turn: by default each is mapped afresh and its pages fault
    again (at least one fault per 2 MB huge page); kept, they reuse the heap's pages."""
    def faults(mode):
        out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT, mode], capture_output=True, text=True,
                             check=True, cwd=REPO).stdout.split()
        return out[0], int(out[1])
    (_, plain), (took, kept) = faults("plain"), faults("keep")
    assert took == "True"
    assert plain >= 20 * 20, plain          # the count sees the faults: 24 huge pages or 12,000 pages an array
    assert kept < 20, kept                   # under one fault an array


def test_keep_freed_memory_refuses_a_size_the_c_call_cannot_take():
    for bad in (-1, 2**31):
        with pytest.raises(ValueError, match="nbytes"):
            host.keep_freed_memory(bad)
