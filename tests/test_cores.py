"""cores.py: passes cut into blocks of rows on threads cover every row once, wait for every block,
and give the very bits of one whole pass for the row passes (elementwise, by_rows, each op that cuts:
cross-entropy, LayerNorm, relu, attention), on a BLAS of one thread in both. A GEMM cut into blocks of
rows goes through the BLAS's kernels for each block, which on some CPUs may round a last bit otherwise
(on the reference machine: the same bits over the model's shapes): cut GEMMs and a whole training run
are held to float32 tolerance."""
import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend
from minitransformer.fast import cpu as cores
from minitransformer.attention import causal_mask, padding_mask
from minitransformer.multihead import multi_head_attention
from minitransformer.run.training import Trainer

from conftest import f32_tol, quiet, tiny_model, training_config


@pytest.fixture
def two_threads(monkeypatch):
    """cores on with 2 threads (the BLAS on one), every pass cut however small; off again after."""
    if cores.use(2) != 2:
        cores.use(1)
        pytest.skip("the BLAS's threads cannot be set in this process (cores.py needs OpenBLAS, as in "
                    "NumPy's wheels, on Linux)")
    monkeypatch.setattr(cores, "MIN_WORK", 0)
    yield
    cores.use(1)


def test_off_by_default_and_refuses_a_bad_thread_count():
    assert cores.threads() == 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be a whole number"):
            cores.use(bad)
    assert cores.threads() == 1


def test_default_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cores.default_threads() == 3
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for unset in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert cores.default_threads() == min(usable, cores.MAX_THREADS)


def test_the_gpu_and_the_blas_threads(two_threads, monkeypatch):
    """On the GPU every pass stays whole; use(1) gives the BLAS back the threads it had."""
    blas = cores._openblas()
    assert [get_n() for _, get_n in blas] == [1] * len(blas)        # while cores cut the GEMMs
    cores.use(1)
    assert [get_n() for _, get_n in blas] == [had for _, had in cores._blas] and cores.threads() == 1
    monkeypatch.setattr(backend, "device", "gpu")
    assert cores.use(2) == 1 and cores.threads() == 1


def blocks_seen(n, threads, **kwargs):
    """The (start, stop) of every slice for_blocks(fn, n, **kwargs) gives fn on `threads` threads, sorted."""
    if cores.use(threads) != threads:
        pytest.skip("the BLAS's threads cannot be set in this process")
    old, cores.MIN_WORK = cores.MIN_WORK, 0
    try:
        seen, lock = [], threading.Lock()

        def fn(rows):
            with lock:
                seen.append((rows.start, rows.stop))
        cores.for_blocks(fn, n, **kwargs)
    finally:
        cores.MIN_WORK = old
        cores.use(1)
    return sorted(seen)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), threads=st.integers(1, 5), chunk=st.one_of(st.none(), st.integers(1, 70)))
def test_for_blocks_covers_every_row_once_in_contiguous_blocks(n, threads, chunk):
    seen = blocks_seen(n, threads, chunk=chunk)
    blocks = max(1, min(threads, n))
    assert seen[0][0] == 0 and seen[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(seen, seen[1:]))         # contiguous, no overlap, no gap
    if chunk is None:
        assert len(seen) == blocks
    else:                                                              # each block in chunks of <= chunk rows
        assert all(0 < stop - start <= chunk for start, stop in seen if n)
        assert len(seen) >= max(blocks, -(-n // chunk))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 5000), threads=st.integers(2, 4), align=st.sampled_from([1, 2, 64]))
def test_for_blocks_cuts_at_the_aligned_even_share(n, threads, align):
    # Cuts rounded down to 64 rows gave the second thread 2,111 of a 4,095-row GEMM and the first 1,984.
    seen = blocks_seen(n, threads, align=align)
    k = len(seen)
    assert seen[0][0] == 0 and seen[-1][1] == n and all(a[1] == b[0] for a, b in zip(seen, seen[1:]))
    assert all(start % align == 0 for start, _ in seen)
    if k > 1:                                                          # every cut within align / 2 of i n / k
        assert k == min(threads, n // align)
        assert all(abs(start - i * n / k) <= align / 2 + 1 for i, (start, _) in enumerate(seen))


def test_cache_rows_fill_chunk_bytes(monkeypatch):
    monkeypatch.setattr(cores, "CHUNK_BYTES", 1000)
    assert cores.cache_rows(np.zeros((50, 10), np.float32)) == 25     # 40 bytes a row
    assert cores.cache_rows(np.zeros((50, 1000), np.float64)) == 1    # a row over the size: one at a time
    assert cores.cache_rows(np.zeros((0, 10), np.float32)) == 1000    # no rows: any chunk
    if backend.gpu_available():                                       # a CuPy array: whole, one launch
        assert cores.cache_rows(backend._import_cupy().zeros((50, 10), np.float32)) is None
    assert cores.cache_rows(np.zeros((50, 10), np.float32).tolist()) is None   # anything not NumPy's, too


def test_cross_entropy_takes_no_chunks_on_the_gpu(monkeypatch, on_cpu):
    """The plain cross-entropy on CuPy (MINITRANSFORMER_FUSED=0) ran its rows 64 at a time, a launch per
    chunk: 55x slower than the fused kernel on an H200 (session 19), 2x before the chunks."""
    seen = []
    monkeypatch.setattr(cores, "cache_rows", lambda a, real=cores.cache_rows: seen.append(real(a)) or seen[-1])
    z = mt.tensor(np.random.default_rng(0).standard_normal((300, 40)).astype(np.float32), requires_grad=True)
    F.cross_entropy(z, np.arange(300) % 40).backward()
    assert seen and all(chunk is not None for chunk in seen)         # NumPy: chunks
    if backend.gpu_available():
        mt.use("gpu")
        monkeypatch.setattr(backend, "fused", False)
        seen.clear()
        z = mt.tensor(backend.asarray(z.data), requires_grad=True)
        F.cross_entropy(z, np.arange(300) % 40).backward()
        assert seen == [None, None]


def test_a_small_pass_or_a_nested_one_runs_whole(two_threads, monkeypatch):
    monkeypatch.setattr(cores, "MIN_WORK", 1000)
    calls = []
    cores.for_blocks(calls.append, 10, work=999)
    assert calls == [slice(0, 10)]
    inner = []
    cores.for_blocks(lambda rows: cores.for_blocks(inner.append, 5, work=10_000), 4, work=10_000)
    assert inner == [slice(0, 5)] * 2                              # each of the 2 outer blocks: once, whole


@pytest.mark.parametrize("failing", [0, 1])
def test_an_error_is_raised_after_every_block_has_finished(two_threads, failing):
    finished = []

    def fn(rows):
        if rows.start == 0 and failing == 0 or rows.start > 0 and failing == 1:
            raise RuntimeError(f"block {rows.start}")
        time.sleep(0.05)
        finished.append(rows.start)
    with pytest.raises(RuntimeError, match="block"):
        cores.for_blocks(fn, 10)
    assert len(finished) == 1                        # the other block ran to its end before the raise


def test_matmul_cuts_rows_at_the_alignment_and_matches_one_call(two_threads, monkeypatch):
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    cuts = []
    monkeypatch.setattr(cores, "for_blocks", lambda fn, n, work, align: cuts.append(align) or fn(slice(0, n)))
    cores.matmul(f(300, 8), f(8, 64))
    cores.matmul(f(300, 8), f(8, 63))                                  # narrower than GEMM_ALIGN: whole
    assert cuts == [cores.GEMM_ALIGN]
    monkeypatch.undo()
    monkeypatch.setattr(cores, "MIN_WORK", 0)
    x = f(300, 37)
    for a, b in [(f(370, 16), f(16, 70)), (x.T, f(300, 64)), (f(200, 37), f(300, 37).T), (f(5, 3, 7, 4), f(5, 3, 4, 6)),
                 (f(6, 7, 4), f(4, 5)), (f(5, 3, 7, 4), f(1, 3, 4, 6)), (f(1, 7, 4), f(3, 4, 5)), (f(7, 4), f(4))]:
        whole = a @ b
        np.testing.assert_allclose(cores.matmul(a, b), whole, rtol=0, err_msg=str((a.shape, b.shape)),
                                   atol=f32_tol(a.shape[-1], np.abs(a).max() * np.abs(b).max()))
    a, b, bias = f(300, 16), f(16, 70), f(70)
    np.testing.assert_allclose(cores.matmul(a, b, bias), a @ b + bias, rtol=0,
                               atol=f32_tol(17, np.abs(a).max() * np.abs(b).max() + np.abs(bias).max()))
    g = f(40, 8)
    assert np.array_equal(cores.elementwise(np.maximum, g, 0), np.maximum(g, 0))
    assert np.array_equal(cores.elementwise(np.multiply, g, g > 0), g * (g > 0))
    row = f(8)
    assert np.array_equal(cores.elementwise(np.multiply, g, row), g * row)  # broadcast: one whole call
    w = f(8)

    def fn(a, b, c, s):                              # rows of a and b, c broadcast (1, 8), s a number
        return a * c + s, None, (b @ w)[:, None]
    a, b, c = f(40, 8), f(40, 8), f(1, 8)
    cut, whole = cores.by_rows(fn, a, b, c, 2.0), fn(a, b, c, 2.0)
    assert cut[1] is None and all(np.array_equal(u, v) for u, v in zip(cut[::2], whole[::2]))
    def into(a, c, o):                                                # writes its rows of o: nothing to join
        np.multiply(a, c, out=o)
    out = np.full((40, 8), np.nan, np.float32)
    assert cores.by_rows(into, a, c, out) is None
    assert np.array_equal(out, a * c)


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1001,), (3, 5, 7), (64, 129)])
@pytest.mark.parametrize("bits", ["PCG64", "PCG64 holding half a step", "Philox"])
def test_uniform_draws_the_numbers_of_one_call_and_leaves_the_generator_alike(two_threads, shape, bits):
    make = lambda: np.random.Generator(np.random.Philox(3) if bits == "Philox" else np.random.PCG64(3))
    cut, whole = make(), make()
    if bits == "PCG64 holding half a step":                       # one float32 drawn: half a 64-bit step kept
        cut.random(dtype=np.float32), whole.random(dtype=np.float32)
    got = cores.uniform(cut, shape)
    assert got.shape == shape and got.dtype == np.float32
    assert np.array_equal(got, whole.random(shape, dtype=np.float32))
    assert np.array_equal(cut.random(9, dtype=np.float32), whole.random(9, dtype=np.float32))


KEEP_P = [0.1, 0.5, np.float64(0.3), np.float32(0.7), 3 * 2.0 ** -24, 5e-8, 1 - 2.0 ** -25, 0.99999997]


def _keep_matches_uniform(shape, bits, p):
    """cores.keep against uniform(...) >= p on two generators alike, and the generators alike after."""
    make = lambda: np.random.Generator(np.random.Philox(3) if bits == "Philox" else np.random.PCG64(3))
    cut, whole = make(), make()
    if bits == "PCG64 holding half a step":                       # one float32 drawn: half a 64-bit step kept
        cut.random(dtype=np.float32), whole.random(dtype=np.float32)
    got = cores.keep(cut, shape, p)
    assert got.shape == shape and got.dtype == bool
    assert np.array_equal(got, whole.random(shape, dtype=np.float32) >= p), (shape, bits, p)
    assert np.array_equal(cut.random(9, dtype=np.float32), whole.random(9, dtype=np.float32))


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1001,), (3, 5, 7), (64, 129)])
@pytest.mark.parametrize("bits", ["PCG64", "PCG64 holding half a step", "Philox"])
@pytest.mark.parametrize("p", KEEP_P)
def test_keep_is_a_uniform_draw_at_least_p_on_one_thread_and_on_two(request, shape, bits, p):
    """cores.keep (the bits of each float32 compared as whole numbers) gives uniform(...) >= p exactly:
    odd and even counts, a generator holding half a step, another generator, p of every kind (a Python
    float, NumPy's float64 and float32, one just above a multiple of 2^-24, one that rounds to 1 in float32)."""
    _keep_matches_uniform(shape, bits, p)
    request.getfixturevalue("two_threads")                              # then cut in blocks (skips where it cannot)
    _keep_matches_uniform(shape, bits, p)


def test_keep_at_a_drawn_value_compares_as_the_floats_do():
    """p at one of the drawn numbers u, and a hair either side of it: as a float32, a Python float (which
    NumPy compares in float32: u + 1e-12 rounds to u, kept) and NumPy's float64 (compared in float64).
    u is one whose 32 random bits end in 8 zeros: its bits equal the threshold keep compares with."""
    bits = np.random.Generator(np.random.PCG64(3)).bit_generator.random_raw(501).view(np.uint32)[:1001]
    i = int(np.flatnonzero(bits % 256 == 0)[0])
    u = float(np.random.Generator(np.random.PCG64(3)).random(1001, dtype=np.float32)[i])
    up, down = np.nextafter(np.float32(u), np.float32(1)), np.nextafter(np.float32(u), np.float32(0))
    for p in (np.float32(u), u, up, down, float(up), u + 1e-12, u - 1e-12, np.float64(u) + 1e-12, np.float64(u) - 1e-12):
        _keep_matches_uniform((1001,), "PCG64", p)


@settings(max_examples=200, deadline=None)
@given(p=st.floats(0.0, 1.0, exclude_max=True), n=st.integers(1, 300))
def test_keep_holds_for_any_probability(p, n):
    _keep_matches_uniform((n,), "PCG64", p)


def _op_results(op):
    """(outputs, gradients) of op() as host arrays: op builds its graph from fresh leaves."""
    out, leaves = op()
    out = out if isinstance(out, tuple) else (out,)
    (out[0] * mt.tensor(np.linspace(0.5, 1.5, out[0].size).reshape(out[0].shape).astype(out[0].dtype))).sum().backward()
    return [np.array(o.data if isinstance(o, mt.Tensor) else o) for o in out] + [leaf.grad.copy() for leaf in leaves]


def _ops():
    rng = np.random.default_rng(1)
    leaf = lambda *shape: mt.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    B, H, T, S, K = 5, 2, 6, 7, 4
    src = np.array([[3] * S] * 3 + [[3, 3, 0, 0, 0, 0, 0]] * 2)
    target = rng.integers(0, 11, (B, T))
    target[1] = 0                                                      # a row of padding alone

    def ce(eps, ignore):
        z = leaf(B, T, 11)
        return F.cross_entropy(z, target, ignore_index=ignore, label_smoothing=eps), [z]

    def norm():
        x, g, b = leaf(B, T, 8), leaf(8), leaf(8)
        return F.layer_norm(x, g, b), [x, g, b]

    def relu():
        x = leaf(B, T, 8)
        return x.relu(), [x]

    def attn(mask, dropout):
        mt.seed(4)
        q, k, v = leaf(B, H, T, K), leaf(B, H, S if mask is None or mask.shape[-1] == S else T, K), None
        v = leaf(*k.shape)
        out = mt.scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout, training=True,
                                              return_weights=True)
        return out, [q, k, v]
    def heads(layout, mask, dropout):                                 # multihead's node: its blocks write in place
        mt.seed(4)
        parts = [leaf(B, T, 3 * H * K)] if layout == "qkv" else [leaf(B, T, H * K), leaf(B, S, 2 * H * K)]
        return multi_head_attention(parts, H, mask, dropout_p=dropout, training=True), parts
    full = np.zeros((B, 1, T, S), bool)                                # every key of every row masked
    return {"cross_entropy eps 0.1": lambda: ce(0.1, 0), "cross_entropy eps 0, no ignore": lambda: ce(0.0, None),
            "cross_entropy all ignored": lambda: (F.cross_entropy(z := leaf(2, 3, 11), np.zeros((2, 3), int),
                                                                  ignore_index=0), [z]),
            "layer_norm": norm, "relu": relu,
            "attention, padding mask": lambda: attn(padding_mask(src), 0.0),
            "attention, causal mask broadcast, dropout": lambda: attn(causal_mask(T), 0.3),
            "attention, no mask": lambda: attn(None, 0.0), "attention, all masked": lambda: attn(full, 0.0),
            "multi-head self-attention, causal, dropout": lambda: heads("qkv", causal_mask(T), 0.3),
            "multi-head encoder-decoder attention, padding mask": lambda: heads("q, kv", padding_mask(src), 0.0)}


@pytest.mark.parametrize("name", list(_ops()))
def test_each_op_that_cuts_gives_the_bits_of_its_whole_pass(two_threads, monkeypatch, name):
    monkeypatch.setattr(cores, "CHUNK_BYTES", 64)                     # chunks of a row or two
    cut = _op_results(_ops()[name])
    monkeypatch.setattr(cores, "CHUNK_BYTES", 1 << 40)                 # the same process, every pass whole
    monkeypatch.setattr(cores, "MIN_WORK", float("inf"))
    whole = _op_results(_ops()[name])
    assert len(cut) == len(whole) and all(np.array_equal(a, b) for a, b in zip(cut, whole)), name


def test_training_cut_or_whole_gives_the_same_updates(two_threads, monkeypatch, task):
    """The Trainer's updates (dropout, label smoothing, padding, Adam) with every pass cut, then whole:
    the weights move alike, to float32 rounding of the gradients' longest sums (tokens x d_model)."""
    tok, pairs, _ = task
    moves = {}
    for min_work in (0, float("inf")):
        monkeypatch.setattr(cores, "MIN_WORK", min_work)
        model = tiny_model(tok, dropout=0.1)
        before = [p.data.copy() for p in model.parameters()]
        trainer = Trainer(model, tok, pairs[:40], None, training_config(steps=3, max_tokens=200), log=quiet)
        trainer.train()
        moves[min_work] = [p.data - b for p, b in zip(model.parameters(), before)]
        assert cores.threads() == 2                   # train() ran with its default, then gave back the 2 set here
    for cut, whole in zip(*moves.values()):
        np.testing.assert_allclose(cut, whole, rtol=0, atol=f32_tol(200 * 32, np.abs(whole).max()))


def test_the_trainer_uses_every_core_while_it_trains(monkeypatch, task, on_cpu):
    """On the CPU (on a GPU the trainer leaves the BLAS's threads as they are: the GPU does the work)."""
    tok, pairs, _ = task
    seen = []
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    trainer = Trainer(tiny_model(tok), tok, pairs[:20], None, training_config(steps=2), log=quiet,
                      callbacks=[lambda t: seen.append(cores.threads())])
    trainer.train()
    expected = 2 if cores._blas else 1               # 1 where the BLAS's threads cannot be set
    assert seen == [expected, expected] and cores.threads() == 1


def test_decoding_runs_with_cores_off_and_gives_them_back(two_threads, monkeypatch, task):
    """Search's products are small: a hand-off each would cost more than it saves, so search turns
    cores off while it decodes (inside training's evaluations too) and back on after."""
    from minitransformer.search import beam_search, greedy_search
    tok, pairs, _ = task
    model = tiny_model(tok).eval()
    seen = []
    monkeypatch.setattr(cores, "for_blocks", lambda fn, n, work=None, align=1: seen.append(cores.threads())
                        or fn(slice(0, n)))
    for search in (greedy_search, beam_search):
        search(model, [p[0] for p in pairs[:3]])
        assert cores.threads() == 2
    assert seen and set(seen) == {1}
