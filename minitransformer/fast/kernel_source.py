"""The CUDA C of the fused row kernels (softmax, log-softmax, their backward, cross-entropy,
LayerNorm, the embedding's backward) and of the column sums (bias gradients), as text: kernels.py
compiles it with CuPy on first use and launches it (lesson 11 reads it here).

Each row kernel runs one block of threads per row; `source(name, dtype)` is what CuPy compiles for
one.
"""
import numpy as np

MAX_BLOCK = 256                           # threads per block at most (a power of two)
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


# -------------------------------------------------------------------- CUDA C of the row kernels
# T is float or double: a typedef put in front of every kernel (one compilation per dtype).
COMMON = r"""
__device__ T max2(T a, T b) { return a > b ? a : b; }

// The sum (largest=false) or maximum (largest=true) of v over the block's threads, for every
// thread: a tree in shared memory buf (blockDim.x a power of two; each step folds the upper half
// onto the lower).
__device__ T block_reduce(T v, T* buf, bool largest) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const T other = buf[threadIdx.x + half];
            buf[threadIdx.x] = largest ? max2(buf[threadIdx.x], other) : buf[threadIdx.x] + other;
        }
        __syncthreads();
    }
    const T result = buf[0];
    __syncthreads();                                   // all have read buf[0] before buf is reused
    return result;
}
__device__ T block_sum(T v, T* buf) { return block_reduce(v, buf, false); }
__device__ T block_max(T v, T* buf) { return block_reduce(v, buf, true); }
"""

SOFTMAX = r"""
// y = softmax(x) over rows of n numbers: one block of threads per row (blockIdx.x), each thread
// striding along the row; block_max and block_sum combine the threads' partial results.
extern "C" __global__ void softmax_rows(const T* x, T* y, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const T* xr = x + blockIdx.x * n;                  // this block's row, in and out
    T* yr = y + blockIdx.x * n;
    T m = xr[0];                                       // pass 1: m = max(x)
    for (long long j = threadIdx.x; j < n; j += blockDim.x) m = max2(m, xr[j]);
    m = block_max(m, buf);
    T s = 0;                                           // pass 2: y = exp(x - m), s = sum(y)
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        yr[j] = exp(xr[j] - m);
        s += yr[j];
    }
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] /= s;   // pass 3: y /= s
}
"""

ROW_KERNELS = {"softmax_rows": SOFTMAX, "log_softmax_rows": r"""
// y = (x - m) - log(sum(exp(x - m))), m = max(x), per row: one block per row, as softmax_rows.
extern "C" __global__ void log_softmax_rows(const T* x, T* y, const long long n) {
    __shared__ T buf[MAX_BLOCK];
    const T* xr = x + blockIdx.x * n;
    T* yr = y + blockIdx.x * n;
    T m = xr[0];
    for (long long j = threadIdx.x; j < n; j += blockDim.x) m = max2(m, xr[j]);
    m = block_max(m, buf);
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) { yr[j] = xr[j] - m; s += exp(yr[j]); }
    const T lse = log(block_sum(s, buf));
    for (long long j = threadIdx.x; j < n; j += blockDim.x) yr[j] -= lse;
}
""", "softmax_backward_rows": r"""
// dx = y * (dy - sum(dy * y)) * scale per row (softmax's backward; scale 1, or attention's
// 1/sqrt(d_k)): one block per row.
extern "C" __global__ void softmax_backward_rows(const T* y, const T* dy, T* dx, const long long n,
                                                 const T scale) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * n;
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += dy[row + j] * y[row + j];
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
        dx[row + j] = (dy[row + j] - s) * y[row + j] * scale;
}
""", "log_softmax_backward_rows": r"""
// dx = (dy - exp(y) * sum(dy)) * scale per row (log_softmax's backward): one block per row.
extern "C" __global__ void log_softmax_backward_rows(const T* y, const T* dy, T* dx,
                                                     const long long n, const T scale) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * n;
    T s = 0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += dy[row + j];
    s = block_sum(s, buf);
    for (long long j = threadIdx.x; j < n; j += blockDim.x)
        dx[row + j] = (dy[row + j] - exp(y[row + j]) * s) * scale;
}
""", "layer_norm_rows": r"""
// Per row of d: mean, then xhat = (x - mean) * rstd with
// rstd = 1 / sqrt(sum((x - mean)^2) / d + eps), y = xhat * gamma + beta. One block per row: two
// block sums (the mean, the sum of squares).
extern "C" __global__ void layer_norm_rows(const T* x, const T* gamma, const T* beta,
                                           const long long d, const T inv_d, const T eps, T* xhat,
                                           T* rstd, T* y) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * d;
    T s = 0;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) s += x[row + j];
    const T mean = block_sum(s, buf) / d;
    T sq = 0;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T c = x[row + j] - mean;
        xhat[row + j] = c;
        sq += c * c;
    }
    const T r = 1 / sqrt(block_sum(sq, buf) * inv_d + eps);
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T h = xhat[row + j] * r;
        xhat[row + j] = h;
        y[row + j] = h * gamma[j] + beta[j];
    }
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}
""", "layer_norm_backward_rows": r"""
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, per row of d:
// one block per row.
extern "C" __global__ void layer_norm_backward_rows(const T* dy, const T* xhat, const T* rstd,
                                                    const T* gamma, const long long d,
                                                    const T inv_d, T* dx) {
    __shared__ T buf[MAX_BLOCK];
    const long long row = blockIdx.x * d;
    T a = 0, b = 0;                                    // a = sum(g), b = sum(g * xhat)
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const T g = dy[row + j] * gamma[j];
        a += g;
        b += g * xhat[row + j];
    }
    const T mean_g = block_sum(a, buf) * inv_d;
    const T mean_gx = block_sum(b, buf) * inv_d;
    const T r = rstd[blockIdx.x];
    for (long long j = threadIdx.x; j < d; j += blockDim.x)
        dx[row + j] = (dy[row + j] * gamma[j] - mean_g - xhat[row + j] * mean_gx) * r;
}
""", "cross_entropy_rows": r"""
// Per row of v logits z with target t: m = max(z), s = sum(exp(z - m)) (both kept for backward) and
// loss = log(s) - keep * (z[t] - m) - eps * mean(z - m), keep = 1 - eps (the mean only if eps > 0).
// One block per row. A target outside [0, v) gives a NaN loss instead of a read outside the row (a
// host target is refused before, as on the plain path; a device target is not checked: the plain
// path wraps it).
extern "C" __global__ void cross_entropy_rows(const T* z, const long long* target,
                                              const long long v, const T keep, const T eps,
                                              T* row_loss, T* row_max, T* row_sum) {
    __shared__ T buf[MAX_BLOCK];
    const T* zr = z + blockIdx.x * v;
    T m = zr[0];
    for (long long j = threadIdx.x; j < v; j += blockDim.x) m = max2(m, zr[j]);
    m = block_max(m, buf);
    T s = 0, total = 0;
    for (long long j = threadIdx.x; j < v; j += blockDim.x) {
        s += exp(zr[j] - m);
        total += zr[j] - m;
    }
    s = block_sum(s, buf);
    total = block_sum(total, buf);
    if (threadIdx.x == 0) {
        const long long t = target[blockIdx.x];
        T loss = (t >= 0 && t < v) ? log(s) - keep * (zr[t] - m) : (T)nan("");
        if (eps != 0) loss -= eps * (total / v);
        row_loss[blockIdx.x] = loss;
        row_max[blockIdx.x] = m;
        row_sum[blockIdx.x] = s;
    }
}
""", "embedding_backward_rows": r"""
// dw[id] = the sum of the rows of g whose id it is, added in their order in the ids, as np.add.at
// adds them on the CPU (so the same bits, on every run: no atomics). One block per row of the ids
// sorted stably (order: where each sorted row sits in g; sid: its id; run_end: where its run of one
// id ends); the block whose row starts a run walks it, each thread down its own columns, 8 rows'
// loads in flight at once, added one by one in order; the other blocks return at once. dw starts at
// zero.
extern "C" __global__ void embedding_backward_rows(const T* g, const long long* order,
                                                   const long long* sid, const long long* run_end,
                                                   T* dw, const long long d) {
    const long long r = blockIdx.x, id = sid[r], end = run_end[r];
    if (r > 0 && sid[r - 1] == id) return;             // not the first row of its run
    for (long long c = threadIdx.x; c < d; c += blockDim.x) {
        T acc = 0;
        long long j = r;
        for (; j + 8 <= end; j += 8) {
            T v[8];
            for (int k = 0; k < 8; ++k) v[k] = g[order[j + k] * d + c];
            for (int k = 0; k < 8; ++k) acc += v[k];
        }
        for (; j < end; ++j) acc += g[order[j] * d + c];
        dw[id * d + c] = acc;
    }
}
""", "column_sum": r"""
// The column sums of an (n, d) matrix a (product = 0), or of a * b entry by entry (product = 1), in
// one launch. Each block (32 x 8 threads) takes 32 columns (first + 32 blockIdx.x ..) of one chunk
// of rows (blockIdx.y); each thread adds every 8th row of the chunk down its column (a warp reads
// 32 neighbouring numbers: one memory line), then thread row 0 adds the 8 partial sums in order:
// parts[chunk, column]. The block that finishes its column tile last (done[blockIdx.x] counts them;
// it sets the count back to 0 for the next launch) adds the chunks' sums in order: out[column].
// Whichever block is last, the order of the additions is fixed: the same bits every run. (A column
// read down on its own, by neighbouring threads, would read a line per number; a second launch for
// the chunks' sums would cost a kernel's gap.) With add = 1 the total is added to what out holds (a
// leaf's gradient buffer: tensor.grad_into), else it replaces it.
extern "C" __global__ void column_sum(const T* a, const T* b, T* parts, T* out, unsigned int* done,
                                      const long long n, const long long d, const long long first,
                                      const long long chunk, const long long product,
                                      const long long add) {
    __shared__ T buf[8][32];
    __shared__ bool last;
    const long long c = first + blockIdx.x * 32LL + threadIdx.x, start = blockIdx.y * chunk;
    const long long stop = start + chunk < n ? start + chunk : n;
    T acc = 0;
    if (c < d)
        for (long long r = start + threadIdx.y; r < stop; r += 8)
            acc += product ? a[r * d + c] * b[r * d + c] : a[r * d + c];
    buf[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < d) {
        for (int k = 1; k < 8; ++k) acc += buf[k][threadIdx.x];
        parts[blockIdx.y * d + c] = acc;
        __threadfence();            // this chunk's sums seen by every block before the count is
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0)
        last = atomicAdd(&done[blockIdx.x], 1u) == gridDim.y - 1;
    __syncthreads();
    if (last && threadIdx.y == 0) {
        if (c < d) {
            T total = 0;
            for (unsigned int k = 0; k < gridDim.y; ++k)
                total += __ldcg(&parts[k * d + c]);  // from L2
            out[c] = add ? out[c] + total : total;
        }
        if (threadIdx.x == 0) done[blockIdx.x] = 0;
    }
}
"""}


def source(name, dtype=np.float32):
    """The CUDA C that CuPy compiles for row kernel `name` and dtype: source("softmax_rows")."""
    head = f"typedef {CTYPES[np.dtype(dtype)]} T;\n#define MAX_BLOCK {MAX_BLOCK}\n"
    return head + COMMON + ROW_KERNELS[name]
