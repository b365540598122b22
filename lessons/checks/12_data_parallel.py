"""Lesson 12, data parallelism: shard_weights against the mean over every token of random updates (and the
weights that give it), ring_allreduce against float64 sums, the same bits on every rank, untouched
inputs and, to the last bit, the ring's order of additions, ring_bytes_sent against a count of the ring's
messages, and uniforms_from against one draw of the whole stream (and, 10**12 numbers on, against a
generator moved there by another route), with each call's memory peak measured by tracemalloc: an answer
that draws the numbers before start fails 10**7 numbers on, holding 40 MB, before the 10**12 cases would
ask it for terabytes."""
import tracemalloc

import numpy as np

F32_EPS = float(np.finfo(np.float32).eps)
HELD = 16 * 10 ** 6                  # bytes a call of uniforms_from may hold at once: its count numbers
                                     # take 4 kB; the 10**7 numbers before start, 40 MB


def check_shard_weights(fn, g):
    rng = np.random.default_rng(120)
    cases = (([189, 200, 195, 188], 2), ([300, 100], 2), ([5, 7, 11], 1), ([10, 300, 40, 50, 7, 90], 3),
             ([120, 80, 100, 20, 60, 1, 300, 9], 4))
    for counts, size in cases:
        g.start(f"{len(counts)} batches of {counts} tokens on {size} rank" + ("s" if size > 1 else ""))
        n = sum(counts)
        mine = []
        for rank in range(size):
            w = g.call(fn, list(counts), rank, size)
            g.cmp(f"rank {rank}'s weights", w, np.array(counts[rank::size]) / n,
                  known=shard_weights_mistakes(counts, rank, size),
                  shape_hint=f"one weight per batch of this rank: batches {rank}, {rank} + size, ...")
            mine.append(np.asarray(w, dtype=np.float64))
        # what the weights are for: per-token losses of each batch, their mean over the whole update, and the
        # ranks' weighted batch means added up over the ranks
        losses = [rng.exponential(2.0, c) for c in counts]
        total = sum(float(np.dot(mine[r], [losses[i].mean() for i in range(r, len(counts), size)])) for r in range(size))
        g.cmp("the ranks' weighted losses added up", total, np.concatenate(losses).mean())


def check_ring_allreduce(fn, g):
    rng = np.random.default_rng(121)
    cases = ((4, (1000,), np.float32), (3, (7, 5), np.float32), (5, (3,), np.float32), (1, (4,), np.float32),
             (2, (6,), np.float64), (8, (2, 50), np.float32))
    for N, shape, dtype in cases:
        g.start(f"{N} rank" + ("s" if N > 1 else "") + f", arrays {shape} {np.dtype(dtype).name}")
        arrays = [(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)).astype(dtype) for _ in range(N)]
        kept = [a.copy() for a in arrays]
        out = g.call(fn, arrays)
        for r, (a, k) in enumerate(zip(arrays, kept)):
            if not np.array_equal(a, k):
                g.fail(f"rank {r}'s input was changed: leave the inputs as they are (work on copies)")
        if not isinstance(out, (list, tuple)) or len(out) != N:
            g.fail(f"return a list of {N} arrays, one per rank, got {type(out).__name__}"
                   + (f" of length {len(out)}" if isinstance(out, (list, tuple)) else ""))
        exact = np.sum(np.stack(arrays).astype(np.float64), axis=0)
        # any order of N - 1 additions is within (N - 1) eps/2 sum|x| of the exact sum; twice that, for safety
        size = np.sum(np.abs(np.stack(arrays).astype(np.float64)), axis=0)
        tol = N * float(np.finfo(dtype).eps) * float(size.max())
        stopped, added = ring(arrays, gather=False), ring(arrays, gather_adds=True)
        short = ring(arrays, steps=N - 2) if N > 2 else arrays          # (N - 2 = 0 steps: each its own)
        for r, y in enumerate(out):
            if isinstance(y, np.ndarray) and y.shape == shape and y.dtype != dtype:
                g.fail(f"rank {r}'s sum is {y.dtype}: keep the inputs' dtype ({np.dtype(dtype).name}): it is "
                       f"what goes over the wire, {np.dtype(dtype).itemsize} bytes an element")
            if N > 1 and is_close(y, exact / N, tol / N) and not is_close(y, exact, tol):   # float32: not `known`
                g.fail(f"rank {r}'s result is the mean: return the sum (the weights of the batches already make "
                       f"it the mean over the update's tokens)")
            g.cmp(f"rank {r}'s sum", y, exact, tol=tol, shape_hint="the shape of the inputs",
                  known=[(stopped[r], "after the reduce-scatter each rank holds ONE finished chunk: the all-gather "
                                      "must pass the finished chunks round the ring"),
                         (added[r], "the all-gather copies the finished chunks (=), it adds nothing (+=)"),
                         (arrays[r], "each rank must end with the sum of all ranks' arrays, not its own"),
                         (short[r], "each phase takes N - 1 steps: a chunk passes N - 1 ranks to meet all N")])
        for r in range(1, N):
            if not np.array_equal(np.asarray(out[r]), np.asarray(out[0])):
                g.fail(f"rank {r}'s sum differs from rank 0's in the last bits: every rank must end with the very "
                       f"same numbers, or the copies of the model drift apart (the all-gather copies finished "
                       f"chunks, it adds nothing)")
        ringed = ring(arrays)[0]                         # the docstring's ring fixes the order of the additions
        if not np.array_equal(np.asarray(out[0]), ringed):
            g.fail(f"the sums are right to rounding, but added in another order than the ring's (in "
                   f"{int(np.sum(np.asarray(out[0]) != ringed))} of {ringed.size} elements): chunk c (np.array_split) "
                   f"starts on rank c and passes to rank c + 1, c + 2, ..., each adding its own; the arrays summed "
                   f"at once (np.sum) group the additions otherwise")


def check_ring_bytes_sent(fn, g):
    for n, itemsize, N in ((964_096, 4, 4), (1000, 4, 2), (63_082_496, 4, 8), (12, 8, 3), (10, 4, 1), (48, 2, 16)):
        g.start(f"{n:,} elements of {itemsize} bytes, {N} rank" + ("s" if N > 1 else ""))
        g.cmp("bytes each rank sends", g.call(fn, n, itemsize, N), counted_bytes(n, itemsize, N),
              known=ring_bytes_sent_mistakes(n, itemsize, N))


def check_uniforms_from(fn, g):
    g.error_hint = ("do not draw the first `start` numbers (start may be 10**12): move a copy of the generator "
                    "on with bit_generator.advance")
    # start 10**7 comes before the 10**12 cases: an answer that draws the numbers before start (or holds
    # anything in proportion to start) fails there on its memory peak, 40 MB, and is never asked for 8 TB
    for seed, drawn, start, count in ((0, 0, 0, 5), (3, 0, 7, 1000), (1, 0, 1, 5), (2, 4, 6, 0), (4, 10, 1000, 3),
                                      (8, 0, 10 ** 7, 4), (5, 0, 2 * 10 ** 12, 4), (6, 2, 2 * 10 ** 12 + 1, 4),
                                      (7, 0, 3, 1)):
        g.start(f"numbers {start:,} to {start + count - 1:,} of a generator (seed {seed}) that drew {drawn} before")
        rng = np.random.default_rng(seed)
        rng.random(drawn, dtype=np.float32)                           # an even count: no half step kept
        state = rng.bit_generator.state
        kept = repr(state)
        yours, held = traced_peak(lambda: g.call(fn, state, start, count))
        if held > HELD:
            g.fail(f"your function held {held / 1e6:,.0f} MB at once for {count} numbers; {g.error_hint}")
        if repr(state) != kept:
            g.fail("the state you were given changed: work on a copy (bits = np.random.PCG64(); bits.state = state)")
        if isinstance(yours, np.ndarray) and yours.shape == (count,) and yours.dtype != np.float32:
            g.fail(f"your numbers are {yours.dtype}: draw float32 (random(..., dtype=np.float32)), whose numbers "
                   f"take half a 64-bit step each; float64 ones take a whole step and are other numbers")
        g.cmp("the numbers", yours, stream(state, start, count), tol=0, shape_hint=f"({count},)",
              known=uniforms_mistakes(state, start, count))


# -------------------------------------------------------------- independent computations
def stream(state, start, count):
    """Numbers start .. start + count - 1 of the float32 stream: drawn whole where start is small, else from
    a generator moved 2 numbers short of start (by whole steps) that then draws them and drops them."""
    bits = np.random.PCG64()
    bits.state = state
    if start < 10 ** 6:
        return np.random.Generator(bits).random(start + count, dtype=np.float32)[start:]
    before = start - 2 - start % 2                                    # even, 2 or 3 short
    bits.advance(before // 2)
    return np.random.Generator(bits).random(start - before + count, dtype=np.float32)[start - before:]


def traced_peak(call):
    """call()'s result, and the most bytes it held at once beyond what was held before: tracemalloc's peak,
    which NumPy's data buffers report to. Tracing stops after, even on an error, unless it was on before
    (pytest -X tracemalloc): then it goes on, only its peak reset."""
    was_on = tracemalloc.is_tracing()
    if not was_on:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = call()
        return result, tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_on:
            tracemalloc.stop()


def moved(state, steps, drop=0):
    """A generator in `state` moved `steps` 64-bit steps on, then `drop` float32 numbers drawn and dropped."""
    bits = np.random.PCG64()
    bits.state = state
    bits.advance(steps)
    gen = np.random.Generator(bits)
    gen.random(drop, dtype=np.float32)
    return gen



def is_close(y, ref, tol):
    """y (anything) is an array of ref's shape within tol of it everywhere."""
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return y.shape == ref.shape and bool(np.all(np.abs(y - ref) <= tol))


def ring(arrays, gather=True, gather_adds=False, steps=None):
    """What each rank holds after the ring, or after a wrong one: without the all-gather; with an all-gather
    that adds; with `steps` steps in each phase, not N - 1."""
    N = len(arrays)
    steps = N - 1 if steps is None else steps
    chunks = [np.array_split(np.array(a).reshape(-1), N) for a in arrays]
    for first in (0, 1) if gather else (0,):            # reduce-scatter sends chunk r - s, all-gather r + 1 - s
        for s in range(steps):
            messages = [(r, (r + first - s) % N, chunks[r][(r + first - s) % N].copy()) for r in range(N)]
            for r, c, data in messages:
                if first and not gather_adds:
                    chunks[(r + 1) % N][c][...] = data
                else:
                    chunks[(r + 1) % N][c] += data
    return [np.concatenate(c).reshape(np.shape(arrays[0])) for c in chunks]


def counted_bytes(n, itemsize, N):
    """Rank 0's messages, one by one: the chunk it sends at each step of both phases."""
    sizes = [len(c) for c in np.array_split(np.arange(n), N)]
    sent = 0
    for first in (0, 1):                                  # reduce-scatter sends chunk -s, all-gather 1 - s
        for s in range(N - 1):
            sent += sizes[(first - s) % N] * itemsize
    return sent


# -------------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def shard_weights_mistakes(counts, rank, size):
    own = np.array(counts[rank::size], dtype=np.float64)
    k = len(counts) // size
    n = sum(counts)
    return [(own / n * size, "the allreduce sums the ranks' gradients, it does not average them: no factor size, "
                             "w_i = n_i / n"),
            (own / own.sum() / size, "that is the average of the ranks' own means: divide every n_i by the tokens "
                                     "of the whole update, all ranks' batches (sum(token_counts))"),
            (own / own.sum(), "divide by the tokens of the whole update, all ranks' batches (sum(token_counts)), "
                              "not this rank's own"),
            (lambda: np.array(counts[rank * k:(rank + 1) * k]) / n,
             "rank r runs batches r, r + size, r + 2 size, ... (every size-th batch), not a block of neighbours"),
            (np.full(len(own), 1 / len(counts)), "weight each batch by its share of the tokens, n_i / n, not 1 / K")]


def uniforms_mistakes(state, start, count):
    draw = lambda gen: gen.random(count, dtype=np.float32)
    odd = start % 2
    return [(lambda: draw(moved(state, start, odd)), "each 64-bit step gives two float32 numbers: advance by "
                                                      "start // 2 steps, not start"),
            (lambda: draw(moved(state, start // 2)) if odd else None,
             "an odd start begins on the high half of a step: advance start // 2 steps, then draw one number "
             "and drop it (the low half)"),
            (lambda: draw(moved(state, (start + 1) // 2, 1)) if odd else None,
             "an odd start rounded up a whole step: advance start // 2 steps, then drop one number"),
            (lambda: draw(moved(state, start // 2, 1)) if not odd else None,
             "an even start begins on a step's low half: drop a number only for an odd start")]


def ring_bytes_sent_mistakes(n, b, N):
    S = n * b
    return [((N - 1) / N * S, "that is one phase: the reduce-scatter AND the all-gather each send N - 1 chunks"),
            (4 * (N - 1) / N * S, "count what the rank sends, not what it sends and receives"),
            (2 * (N - 1) * S, "each message is one chunk, 1/size of the array, not the whole of it"),
            ((N - 1) * S, "that is what rank 0 sends back when every rank sends it the whole gradient: the ring "
                          "sends chunks"),
            (2 * S, "2 x the bytes is the limit for many ranks; for size ranks it is 2 (size - 1) / size of them"),
            (2 * (N - 1) / N * n, "that counts elements: times itemsize for bytes")]


ITEMS = [("shard_weights", check_shard_weights), ("ring_allreduce", check_ring_allreduce),
         ("ring_bytes_sent", check_ring_bytes_sent), ("uniforms_from", check_uniforms_from)]
