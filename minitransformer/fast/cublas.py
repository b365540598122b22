"""cuBLAS's GEMM through ctypes: the matmul a CUDA graph can capture (graphs.py; lesson 11).

CuPy 14 refuses every cuBLAS call while a stream is being captured ("calling cuBLAS API during
stream capture is currently unsupported": its wrapper checks, though cuBLAS itself supports
capture). `matmul` calls cuBLAS's strided-batched GEMM on a handle of its own, set to the current
stream, with a workspace given up front (cuBLAS must not allocate inside a capture), on TF32 tensor
cores where CuPy's own switch (CUPY_TF32=1) asks for them. `plan(a, b)` is the layout work (which
operand cuBLAS reads transposed, leading dimensions, batch strides): pure Python on shapes and
strides, tested on the CPU against np.matmul through `emulate`, a NumPy model of the cuBLAS call.
Row-major C = A B is computed as the column-major C^T = B^T A^T, so no operand is copied when it is
C-ordered or a transposed view.

    backend.gemm = cublas.matmul      # graphs.py, while graphs are on: backend.matmul comes here
"""
import ctypes
import os

import numpy as np

from .. import backend

OP_N = 0                                    # cublasOperation_t
OP_T = 1                                    # cublasOperation_t
TF32_TENSOR_OP_MATH = 3                     # cublasMath_t: float32 GEMMs on TF32 tensor cores
WORKSPACE = 32 << 20                        # bytes given to cuBLAS before any capture


def _layout(shape, strides, itemsize):
    """One row-major matrix (rows, cols) at these byte strides, as cuBLAS's column-major sees its
    memory: (op, ld) with op OP_N where the memory holds its transpose (rows contiguous), OP_T where
    it holds the matrix itself (a transposed view); None where neither (then the caller copies)."""
    r, c = shape
    s0, s1 = strides
    if s0 % itemsize or s1 % itemsize:
        return None
    s0 = s0 // itemsize
    s1 = s1 // itemsize
    if (s1 == 1 or c == 1) and (r == 1 or s0 >= c):
        return OP_N, max(s0 if r > 1 else c, c, 1)
    if (s0 == 1 or r == 1) and (c == 1 or s1 >= r):
        return OP_T, max(s1 if c > 1 else r, r, 1)
    return None


def plan(a, b):
    """How cuBLAS computes a @ b (a (..., M, K), b (..., K, N) or (K, N); the batch axes of b absent
    or equal to a's, or a 2-D and b batched): a dict of the call's arguments for C (batch, M, N)
    row-major, contiguous, as the column-major C^T = B^T A^T; None where this layout is not handled
    (batch axes that broadcast otherwise, or a batch that is not one stride apart): the caller
    copies or falls back."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        return None
    M = a.shape[-2]
    K = a.shape[-1]
    N = b.shape[-1]
    if a.ndim > 2 and b.ndim > 2 and a.shape[:-2] != b.shape[:-2]:
        return None
    lead = a.shape[:-2] if a.ndim > 2 else b.shape[:-2]
    batch = int(np.prod(lead, dtype=np.int64))

    # elements from one matrix to the next, if one stride does
    def batch_stride(x):
        if x.ndim == 2:
            return 0
        dims = [(n, s) for n, s in zip(x.shape[:-2], x.strides[:-2]) if n > 1]
        if not dims:
            return 0
        step = dims[-1][1]
        for (n_out, s_out), (n_in, s_in) in zip(dims[:-1], dims[1:]):
            if s_out != s_in * n_in:
                return None
        return step // x.itemsize if step % x.itemsize == 0 else None
    la = _layout((M, K), a.strides[-2:], a.itemsize)
    lb = _layout((K, N), b.strides[-2:], b.itemsize)
    sa = batch_stride(a)
    sb = batch_stride(b)
    if la is None or lb is None or sa is None or sb is None:
        return None
    return {"opB": lb[0], "opA": la[0], "m": N, "n": M, "k": K, "ldb": lb[1], "lda": la[1],
            "ldc": N, "strideB": sb, "strideA": sa, "strideC": M * N, "batch": batch,
            "out_shape": lead + (M, N)}


def emulate(p, a_mem, a_off, b_mem, b_off, c_mem):
    """What cuBLAS's strided-batched GEMM computes for plan p, in NumPy on flat memory (element
    offsets a_off, b_off into a_mem, b_mem; C from 0): the CPU test of plan()."""
    # op(X) (rows, cols), X column-major at ld
    def matrix(mem, off, op, rows, cols, ld, i, stride):
        r, c = (rows, cols) if op == OP_N else (cols, rows)
        x = np.lib.stride_tricks.as_strided(mem[off + i * stride:], (r, c),
                                            (mem.itemsize, ld * mem.itemsize))
        return x if op == OP_N else x.T
    for i in range(p["batch"]):
        first = matrix(b_mem, b_off, p["opB"], p["m"], p["k"], p["ldb"], i,
                       p["strideB"])                                       # B^T (N, K)
        second = matrix(a_mem, a_off, p["opA"], p["k"], p["n"], p["lda"], i,
                        p["strideA"])                                      # A^T (K, M)
        c = first @ second                                                 # C^T (N, M)
        c_mem[i * p["strideC"]: (i + 1) * p["strideC"]] = c.T.reshape(-1)  # column-major
    return c_mem


class _Cublas:
    """libcublas (the one CuPy loaded) through ctypes: a handle and a workspace of our own."""

    def __init__(self, xp):
        # CuPy loads libcublas
        xp.matmul(xp.ones((2, 2), np.float32), xp.ones((2, 2), np.float32))
        with open("/proc/self/maps", encoding="utf-8") as maps:   # the one it loaded (Linux)
            path = next(line.split()[-1] for line in maps if "libcublas.so" in line)
        self.lib = ctypes.CDLL(path)
        self.xp = xp
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.workspace = xp.empty(WORKSPACE, dtype=np.uint8)      # kept as long as the handle
        self._check(self.lib.cublasSetWorkspace_v2(self.handle,
                                                   ctypes.c_void_p(self.workspace.data.ptr),
                                                   ctypes.c_size_t(WORKSPACE)),
                    "cublasSetWorkspace")
        if os.environ.get("CUPY_TF32") == "1":            # CuPy's own switch: TF32 tensor cores
            self._check(self.lib.cublasSetMathMode(self.handle, TF32_TENSOR_OP_MATH),
                        "cublasSetMathMode")
        p = ctypes.c_void_p
        i = ctypes.c_int
        ll = ctypes.c_longlong
        for name, real in (("cublasSgemmStridedBatched", ctypes.c_float),
                           ("cublasDgemmStridedBatched", ctypes.c_double)):
            getattr(self.lib, name).argtypes = [p, i, i, i, i, i, ctypes.POINTER(real), p, i, ll,
                                                p, i, ll, ctypes.POINTER(real), p, i, ll, i]
        self.lib.cublasSetStream_v2.argtypes = [p, p]

    @staticmethod
    def _check(status, what):
        if status != 0:
            raise RuntimeError(f"{what}: cuBLAS status {status}")

    def gemm(self, p, a, b, c, beta=0.0):
        """C = A B + beta C for plan p, on the current stream: alpha 1, host scalars (captured by
        value)."""
        real, name = ((ctypes.c_float, "cublasSgemmStridedBatched") if a.dtype == np.float32
                      else (ctypes.c_double, "cublasDgemmStridedBatched"))
        stream = self.xp.cuda.get_current_stream().ptr
        self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)),
                    "cublasSetStream")
        one = real(1.0)
        beta = real(beta)
        self._check(getattr(self.lib, name)(
            self.handle, p["opB"], p["opA"], p["m"], p["n"], p["k"], ctypes.byref(one),
            ctypes.c_void_p(b.data.ptr), p["ldb"], p["strideB"],
            ctypes.c_void_p(a.data.ptr), p["lda"], p["strideA"],
            ctypes.byref(beta), ctypes.c_void_p(c.data.ptr), p["ldc"], p["strideC"], p["batch"]),
            name)


_cublas = None                               # the _Cublas of this process, made on first use


def matmul(a, b, out=None, add=False):
    """backend.xp.matmul(a, b, out=out) through cuBLAS by ctypes (capturable); float32/float64 GEMMs
    of the layouts plan() reads (others copied C-ordered first); anything else goes to CuPy's own
    matmul. add=True: out += a @ b, added by the GEMM itself (beta 1) where out is C-ordered and of
    a's dtype."""
    global _cublas
    xp = backend.xp
    p = None
    if a.dtype == b.dtype and a.dtype in (np.float32, np.float64) and 0 not in a.shape + b.shape:
        p = plan(a, b)
        if p is None:
            a = xp.ascontiguousarray(a)
            b = xp.ascontiguousarray(b)
            p = plan(a, b)
    # another dtype, an empty operand, batch axes that broadcast otherwise
    if p is None:
        c = xp.matmul(a, b, out=None if add else out)
    else:
        if _cublas is None:
            _cublas = _Cublas(xp)
        direct = (out is not None and out.flags.c_contiguous and out.shape == p["out_shape"]
                  and out.dtype == a.dtype)
        c = out if direct else xp.empty(p["out_shape"], dtype=a.dtype)
        _cublas.gemm(p, a, b, c, beta=1.0 if add and direct else 0.0)
    if out is None or c is out:
        return c
    if add:
        out += c
    else:
        out[...] = c
    return out
