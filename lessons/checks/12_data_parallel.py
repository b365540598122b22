"""Lesson 12, data parallelism: shard_weights against the mean over every token of random updates
(and the weights that give it), ring_allreduce against float64 sums, the same bits on every rank,
untouched inputs and, to the last bit, the ring's order of additions, and ring_bytes_sent against a
count of the ring's messages."""
import numpy as np


def check_shard_weights(fn, g):
    rng = np.random.default_rng(120)
    cases = (([189, 200, 195, 188], 2, False), ([300, 100], 2, False), ([5, 7, 11], 1, False),
             ([10, 300, 40, 50, 7, 90], 3, False), ([120, 80, 100, 20, 60, 1, 300, 9], 4, False),
             ([189, 200, 195, 188], 2, True), ([10, 300, 40, 50, 7, 90], 3, True),
             ([300, 100], 2, True), ([5, 7, 11], 1, True))
    for counts, size, average in cases:
        g.start(f"{len(counts)} batches of {counts} tokens on {size} rank"
                + ("s" if size > 1 else "") +
                (", an allreduce that averages" if average else ""))
        n = sum(counts)
        mine = []
        for rank in range(size):
            g.error_hint = ("keep the stub's signature, shard_weights(token_counts, rank, size, "
                            "average=False)")
            w = g.call(fn, list(counts), rank, size, **({"average": True} if average else {}))
            right = np.array(counts[rank::size]) / n * (size if average else 1)
            known = shard_weights_mistakes(counts, rank, size, average)
            if g.pending is None:                # (a match to confirm first: the next case does)
                off_by_factor(g, f"rank {rank}'s weights", w, right, known,
                              WEIGHTS_AVERAGED if average else
                              WEIGHTS_SUMMED)
            g.cmp("this rank's weights", w, right, known=known,
                  shape_hint=f"one weight per batch of this rank: batches {rank}, {rank} + size, "
                             f"...")
            mine.append(np.asarray(w, dtype=np.float64))
        # what the weights are for: per-token losses of each batch, their mean over the whole
        # update, and the ranks' weighted batch means added up over the ranks
        losses = [rng.exponential(2.0, c) for c in counts]
        total = sum(float(np.dot(mine[r], [losses[i].mean() for i in range(r, len(counts), size)]))
                    for r in range(size))
        g.cmp("the allreduce of the ranks' weighted losses", total / (size if average else 1),
              np.concatenate(losses).mean())


def check_ring_allreduce(fn, g):
    rng = np.random.default_rng(121)
    cases = ((4, (1000,), np.float32), (3, (7, 5), np.float32), (5, (3,), np.float32),
             (1, (4,), np.float32), (2, (6,), np.float64), (8, (2, 50), np.float32))
    for N, shape, dtype in cases:
        g.start(f"{N} rank" + ("s" if N > 1 else "") + f", arrays {shape} {np.dtype(dtype).name}")
        arrays = [(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, shape)).astype(dtype)
                  for _ in range(N)]
        g.write_hints = {"arrays": "leave the inputs as they are (work on copies)"}
        out = g.call(fn, arrays)
        if not isinstance(out, (list, tuple)) or len(out) != N:
            g.fail(f"return a list of {N} arrays, one per rank, got {type(out).__name__}"
                   + (f" of length {len(out)}" if isinstance(out, (list, tuple)) else ""))
        shared_memory(g, out, arrays)
        exact = np.sum(np.stack(arrays).astype(np.float64), axis=0)
        # any order of N - 1 additions is within (N - 1) eps/2 sum|x| of the exact sum; twice that,
        # for safety
        size = np.sum(np.abs(np.stack(arrays).astype(np.float64)), axis=0)
        tol = N * float(np.finfo(dtype).eps) * float(size.max())
        stopped, added = ring(arrays, gather=False), ring(arrays, gather_adds=True)
        short = ring(arrays, steps=N - 2) if N > 2 else arrays     # (N - 2 = 0 steps: each its own)
        for r, y in enumerate(out):
            if isinstance(y, np.ndarray) and y.shape == shape and y.dtype != dtype:
                g.fail(f"rank {r}'s sum is {y.dtype}: keep the inputs' dtype "
                       f"({np.dtype(dtype).name}): it is what goes over the wire, "
                       f"{np.dtype(dtype).itemsize} bytes an element")
            if N > 1 and is_close(y, exact / N, tol / N) and not is_close(y, exact, tol):
                # float32: not `known`
                g.fail(f"rank {r}'s result is the mean: return the sum (the weights of the batches "
                       f"already make it the mean over the update's tokens)")
        try:                                             # every rank's result at once: (N, *shape)
            every = np.stack([np.asarray(y, dtype=np.float64) for y in out])
        except (TypeError, ValueError):
            every = out
        g.cmp("every rank's sum (ranks along the first axis)", every, np.stack([exact] * N),
              tol=tol, shape_hint=f"{N} arrays, each of the shape of the inputs, {shape}",
              known=[(np.stack(stopped),
                      "after the reduce-scatter each rank holds ONE finished chunk: the all-gather "
                      "must pass the finished chunks round the ring"),
                     (np.stack(added),
                      "the all-gather copies the finished chunks (=), it adds nothing (+=)"),
                     (np.stack(arrays),
                      "each rank must end with the sum of all ranks' arrays, not its own"),
                     (np.stack(short),
                      "each phase takes N - 1 steps: a chunk passes N - 1 ranks to meet all N")])
        if g.pending is not None:                      # a mistake to confirm on the next case first
            continue
        for r in range(1, N):
            if not np.array_equal(np.asarray(out[r]), np.asarray(out[0])):
                g.fail(f"rank {r}'s sum differs from rank 0's in the last bits: every rank must "
                       f"end with the very same numbers, or the copies of the model drift apart "
                       f"(the all-gather copies finished chunks, it adds nothing)")
        ringed = ring(arrays)[0]           # the ring of the lesson fixes the order of the additions
        if not np.array_equal(np.asarray(out[0]), ringed):
            g.fail(f"the sums are right to rounding, but added in another order than the ring's "
                   f"(in {int(np.sum(np.asarray(out[0]) != ringed))} of {ringed.size} elements): "
                   f"chunk c (np.array_split) starts on rank c and passes to rank c + 1, c + 2, "
                   f"..., each adding its own; the arrays summed at once (np.sum) group the "
                   f"additions otherwise")


def check_ring_bytes_sent(fn, g):
    cases = [(964_096, 4, 4, 0), (1000, 4, 2, 1), (63_082_496, 4, 8, 0), (12, 8, 3, 2),
             (10, 4, 1, 0), (48, 2, 16, 5), (10, 4, 3, 0), (10, 4, 3, 1), (10, 4, 3, 2),
             (1001, 4, 4, 3), (5, 8, 8, 6), (5, 8, 8, 3), (7, 2, 2, 1), (1_000_003, 4, 8, 7)]
    for n, itemsize, N, rank in cases:
        g.start(f"{n:,} elements of {itemsize} bytes, rank {rank} of {N}" +
                ("" if n % N == 0 else f" (chunks of {n // N} and {n // N + 1} elements)"))
        g.cmp("the bytes sent", g.call(fn, n, itemsize, N, rank),
              counted_bytes(n, itemsize, N, rank),
              known=ring_bytes_sent_mistakes(n, itemsize, N, rank))


# -------------------------------------------------------------- independent computations
def is_close(y, ref, tol):
    """y (anything) is an array of ref's shape within tol of it everywhere."""
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return y.shape == ref.shape and bool(np.all(np.abs(y - ref) <= tol))


def ring(arrays, gather=True, gather_adds=False, steps=None):
    """What each rank holds after the ring, or after a wrong one: without the all-gather; with an
    all-gather that adds; with `steps` steps in each phase, not N - 1."""
    N = len(arrays)
    steps = N - 1 if steps is None else steps
    chunks = [np.array_split(np.array(a).reshape(-1), N) for a in arrays]
    for first in (0, 1) if gather else (0,):
        # reduce-scatter sends chunk r - s, all-gather r + 1 - s
        for s in range(steps):
            messages = [(r, (r + first - s) % N, chunks[r][(r + first - s) % N].copy())
                        for r in range(N)]
            for r, c, data in messages:
                if first and not gather_adds:
                    chunks[(r + 1) % N][c][...] = data
                else:
                    chunks[(r + 1) % N][c] += data
    return [np.concatenate(c).reshape(np.shape(arrays[0])) for c in chunks]


def chunk_sizes(n, N):
    """The lengths of np.array_split's N chunks of n elements, computed (no array): the first n % N
    have one more."""
    return [n // N + (1 if c < n % N else 0) for c in range(N)]


def counted_bytes(n, itemsize, N, rank=0):
    """The rank's messages, one by one: the chunk it sends at each step of both phases."""
    sizes = chunk_sizes(n, N)
    sent = 0
    for first in (0, 1):                    # reduce-scatter sends chunk r - s, all-gather r + 1 - s
        for s in range(N - 1):
            sent += sizes[(rank + first - s) % N] * itemsize
    return sent


def off_by_factor(g, what, yours, right, known, hint):
    """Fail with `hint` where `yours` is `right` times a constant other than 1 and no known mistake:
    the generic factor hints speak of gradients, not of weights."""
    try:
        y = np.asarray(yours, dtype=np.float64)
    except (TypeError, ValueError):
        return
    if y.shape != right.shape or not np.all(np.isfinite(y)):
        return
    if any(np.shape(wrong) == y.shape and np.allclose(y, wrong, rtol=1e-9) for wrong, _ in known):
        return                                            # g.cmp names it
    if not np.any(y):
        g.fail(f"{what} are all 0: each is n_i / n (an integer division, //, gives 0)")
    s = float(np.dot(y, right) / np.dot(right, right))
    if abs(s - 1) > 1e-6 and np.allclose(y, s * right, rtol=1e-9, atol=0):
        g.fail(f"{what} are the right ones times {s:.4g}: {hint}")


def shared_memory(g, out, arrays):
    """Fail where a rank's result is an input, or one array held by two ranks."""
    for r, y in enumerate(out):
        if not isinstance(y, np.ndarray):
            continue
        for a in arrays:
            if np.shares_memory(y, a):
                g.fail(f"rank {r}'s result shares memory with an input: return new arrays, the "
                       f"inputs unchanged")
        for s in range(r):
            if isinstance(out[s], np.ndarray) and np.shares_memory(y, out[s]):
                g.fail(f"ranks {s} and {r} return one array (or views of one): each rank holds its "
                       f"own copy of the sum (in a real run they are N processes' memories), so "
                       f"return N separate arrays")


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
WEIGHTS_SUMMED = ("the weights of all ranks' batches add up to 1: each is n_i / n, with n the "
                  "target tokens of the whole update (all ranks' batches) and no other factor")
WEIGHTS_AVERAGED = ("the averaging allreduce divides the ranks' sum by size, so the weights of all "
                    "ranks' batches add up to size: each is size * n_i / n, n the tokens of the "
                    "whole update")


def shard_weights_mistakes(counts, rank, size, average=False):
    own = np.array(counts[rank::size], dtype=np.float64)
    k = len(counts) // size
    n = sum(counts)
    if average:
        return [(own / n,
                 "this allreduce averages: it divides the ranks' sum by size, so each weight needs "
                 "a factor size, size * n_i / n"),
                (own / own.sum(),
                 "that is DistributedDataParallel's default, each rank's own mean averaged: right "
                 "only when every rank holds as many tokens; weigh by size * n_i / n, n the tokens "
                 "of the whole update"),
                (lambda: np.array(counts[rank * k:(rank + 1) * k]) / n * size,
                 "rank r runs batches r, r + size, r + 2 size, ... (every size-th batch), not a "
                 "block of neighbours")]
    return [(own / n * size,
             "the allreduce sums the ranks' gradients, it does not average them: no factor size, "
             "w_i = n_i / n"),
            (own / own.sum() / size,
             "that is the average of the ranks' own means: divide every n_i by the tokens of the "
             "whole update, all ranks' batches (sum(token_counts))"),
            (own / own.sum(),
             "divide by the tokens of the whole update, all ranks' batches (sum(token_counts)), "
             "not this rank's own"),
            (lambda: np.array(counts[rank * k:(rank + 1) * k]) / n,
             "rank r runs batches r, r + size, r + 2 size, ... (every size-th batch), not a block "
             "of neighbours"),
            (np.full(len(own), 1 / len(counts)),
             "weight each batch by its share of the tokens, n_i / n, not 1 / K")]


def ring_bytes_sent_mistakes(n, b, N, rank):
    S = n * b
    uneven = [] if n % N == 0 else [
        (2 * (N - 1) * (n // N) * b,
         "np.array_split's chunks are not all n // size elements: the first n % size have one "
         "more; count the chunks this rank sends"),
        (2 * (N - 1) / N * S,
         "the chunks are whole elements (np.array_split: the first n % size have one more): count "
         "the chunks this rank sends, not 2 (size - 1) / size of the array")]
    other_rank = [] if rank == 0 or counted_bytes(n, b, N, 0) == counted_bytes(n, b, N, rank) else [
        (counted_bytes(n, b, N, 0),
         "that is what rank 0 sends: which chunks a rank sends depends on the rank (rank r sends "
         "chunk r - s, then r + 1 - s, at step s)")]
    return uneven + other_rank + [((N - 1) / N * S, "that is one phase: the reduce-scatter AND the "
                                                    "all-gather each send N - 1 chunks"),
            (4 * (N - 1) / N * S, "count what the rank sends, not what it sends and receives"),
            (2 * (N - 1) * S,
             "each message is one chunk, 1/size of the array, not the whole of it"),
            ((N - 1) * S,
             "that is what rank 0 sends back when every rank sends it the whole gradient: the ring "
             "sends chunks"),
            (2 * S, "2 x the bytes is the limit for many ranks; for size ranks it is 2 (size - 1) "
                    "/ size of them"),
            (2 * (N - 1) / N * n, "that counts elements: times itemsize for bytes")]


ITEMS = [("shard_weights", check_shard_weights), ("ring_allreduce", check_ring_allreduce),
         ("ring_bytes_sent", check_ring_bytes_sent)]
