"""Lesson 12, answers: the weights of a data-parallel rank's batches, the ring allreduce, and what
it sends.

Graded by `python lessons/check.py 12 --solutions`; your own go in lessons/exercises/12_data_parallel.py.

Answers to the lesson's questions:
1. The mean over all 1,000 tokens: (200 * 3.0 + 300 * 2.0 + 500 * 1.0) / 1000 = 1.7. The average of the
   three means, (3.0 + 2.0 + 1.0) / 3 = 2.0, gives rank 0's 200 tokens as much say as rank 2's 500.
2. The gradient is S = 63,082,496 * 4 = 252,329,984 bytes; in a ring of 8 each rank sends
   2 * 7 / 8 * S = 441,577,472 bytes (about 442 MB). Through rank 0, rank 0 sends the sum back to the 7
   others, 7 * S = 1,766,309,888 bytes (about 1.77 GB), and receives as much.
3. With dropout off, yes, bit for bit (on the same machine, with the same BLAS threads): every gradient
   element, and the loss, is one float32 addition t_0 + t_1 on either side, and addition is commutative;
   only its grouping (associativity) fails, from three terms on: 2 ranks with accum 2 add 4 terms
   (t_0 + t_2) + (t_1 + t_3), one process ((t_0 + t_1) + t_2) + t_3, equal to rounding only.
   With dropout on, batch 0 gets the same masks in both: rank 0 seeds with step_seed(seed, step, 0) ==
   step_seed(seed, step), the one process's seed, and batch 0 draws first. Batch 1 does not: the one
   process draws its masks further along that same stream, rank 1 from its own, step_seed(seed, step, 1).
4. 2(N - 1)/N S tends to 2 S: each rank sends at most twice the gradient, however many ranks there are,
   so the ring's bandwidth term hardly grows with N. Through rank 0, rank 0 sends (N - 1) S: linear in N.
5. Each chunk is summed only once, along the ring during the reduce-scatter, by one chain of additions
   in one order; the all-gather then only copies the finished chunk to every rank. Nobody re-adds.
6. A batch normalisation: its mean and variance over the batch are not the sum of the ranks' means
   and variances, so each rank's normalised output, and its gradient, differ from the big batch's.
   LayerNorm normalises each position over its own features: a position never sees another sentence.
7. Each Allreduce pays the latency 2 (N - 1) times: 193 arrays cost 2 * 7 * 193 * 50 us = 135 ms per
   update, 10 buckets 7 ms. Buckets pay the latency per 25 MiB, not per array.
8. NumPy runs every elementwise pass on one core; only the BLAS spreads its products over several.
   One process on two cores leaves the second idle for every pass that is not a matrix product; two
   rank threads of one core each keep both busy from the first pass to the last, and meet at the sum.
(Each answer explained: lessons/answers/12_data_parallel.md.)
"""
import numpy as np


def shard_weights(token_counts, rank, size):
    """w_i = n_i / n for the rank's batches i = rank, rank + size, ..., with n = sum of ALL n_i.

    The update's loss is L = (1/n) sum_i sum_k l_ik = sum_i (n_i / n) L_i. Each batch lives on exactly one
    rank, so the ranks' sums of (n_i / n) L_i add up to L, and their gradients to grad L. Dividing by the
    rank's own tokens m_r (and averaging over the ranks) would weigh a token 1 / (size * m_r) instead of 1 / n.
    """
    n = sum(token_counts)
    return [c / n for c in token_counts[rank::size]]


def ring_allreduce(arrays):
    """Reduce-scatter (N - 1 steps, adding), then all-gather (N - 1 steps, copying), over N chunks.

    After the reduce-scatter rank r holds the complete sum of chunk (r + 1) % N, summed along the ring; the
    all-gather only copies finished chunks, so every rank ends with the very same bits.
    """
    N = len(arrays)
    shape = arrays[0].shape
    chunks = [np.array_split(np.array(a).reshape(-1), N) for a in arrays]   # copies: the inputs stay as they are
    for s in range(N - 1):                                                  # reduce-scatter
        messages = [(r, (r - s) % N, chunks[r][(r - s) % N].copy()) for r in range(N)]
        for r, c, data in messages:
            chunks[(r + 1) % N][c] += data
    for s in range(N - 1):                                                  # all-gather
        messages = [(r, (r + 1 - s) % N, chunks[r][(r + 1 - s) % N].copy()) for r in range(N)]
        for r, c, data in messages:
            chunks[(r + 1) % N][c][...] = data
    return [np.concatenate(c).reshape(shape) for c in chunks]


def ring_bytes_sent(n_elements, itemsize, size, rank=0):
    """The chunks rank r sends: (r - s) % N in the reduce-scatter, (r + 1 - s) % N in the all-gather, for
    s = 0 .. N - 2: every chunk but (r + 1) % N, then every chunk but (r + 2) % N. np.array_split makes the
    first n % N chunks one element longer. With equal chunks: 2 (N - 1) / N * n * itemsize (0 alone)."""
    def chunk(c):
        return n_elements // size + (1 if c % size < n_elements % size else 0)
    sent = [(rank - s) % size for s in range(size - 1)] + [(rank + 1 - s) % size for s in range(size - 1)]
    return itemsize * sum(chunk(c) for c in sent)


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    counts, means = [200, 300, 500], [3.0, 2.0, 1.0]
    assert abs(sum(w * L for r in range(3) for w, L in zip(shard_weights(counts, r, 3), means[r::3])) - 1.7) < 1e-12
    assert sum(means) / 3 == 2.0
    S = 63_082_496 * 4
    assert ring_bytes_sent(63_082_496, 4, 8) == 441_577_472 == 2 * 7 * S // 8
    assert 7 * S == 1_766_309_888
    t = np.float32([0.1, 0.2, -0.3, 0.7])
    assert t[0] + t[1] == t[1] + t[0] and (t[0] + t[1]) + t[2] != t[0] + (t[1] + t[2])
    assert [ring_bytes_sent(1000, 4, N) for N in (2, 10, 100)] == [4000, 7200, 7920]               # 4: -> 2 S
    rng = np.random.default_rng(0)                                                                  # 5
    summed = ring_allreduce([rng.standard_normal(10).astype(np.float32) for _ in range(4)])
    assert all(np.array_equal(summed[0], s) for s in summed)
    x = rng.standard_normal((8, 5))                                                                 # 6
    def layer_norm(x):
        return (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    def batch_norm(x):
        return (x - x.mean(0)) / x.std(0)
    assert np.array_equal(layer_norm(x), np.concatenate([layer_norm(x[:4]), layer_norm(x[4:])]))
    assert not np.allclose(batch_norm(x), np.concatenate([batch_norm(x[:4]), batch_norm(x[4:])]))
    assert round(2 * 7 * 193 * 50e-6 * 1e3) == 135 and round(2 * 7 * 10 * 50e-6 * 1e3) == 7         # 7
