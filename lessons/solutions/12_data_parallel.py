"""Lesson 12, answers: the weights of a data-parallel rank's batches, the ring allreduce, and what
it sends.

Graded by `python lessons/check.py 12 --solutions`; your own go in
lessons/exercises/12_data_parallel.py.

The answers to the lesson's questions, explained, are in lessons/answers/12_data_parallel.md.
"""
import numpy as np


def shard_weights(token_counts, rank, size, average=False):
    """w_i = n_i / n for the rank's batches i = rank, rank + size, ..., with n = sum of ALL n_i;
    size times that where the allreduce averages.

    The update's loss is L = (1/n) sum_i sum_k l_ik = sum_i (n_i / n) L_i. Each batch lives on
    exactly one rank, so the ranks' sums of (n_i / n) L_i add up to L, and their gradients to
    grad L. Dividing by the rank's own tokens m_r (and averaging over the ranks) would weigh a token
    1 / (size * m_r) instead of 1 / n. An allreduce that averages divides that sum by size: each
    weight carries a factor size to undo it.
    """
    n = sum(token_counts)
    scale = size if average else 1
    return [scale * c / n for c in token_counts[rank::size]]


def ring_allreduce(arrays):
    """Reduce-scatter (N - 1 steps, adding), then all-gather (N - 1 steps, copying), over N chunks.

    After the reduce-scatter rank r holds the complete sum of chunk (r + 1) % N, summed along the
    ring; the all-gather only copies finished chunks, so every rank ends with the very same bits.
    """
    N = len(arrays)
    shape = arrays[0].shape
    # copies: the inputs stay as they are
    chunks = [np.array_split(np.array(a).reshape(-1), N) for a in arrays]
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
    """The chunks rank r sends: (r - s) % N in the reduce-scatter, (r + 1 - s) % N in the
    all-gather, for s = 0 .. N - 2: every chunk but (r + 1) % N, then every chunk but (r + 2) % N.
    np.array_split makes the first n % N chunks one element longer. With equal chunks:
    2 (N - 1) / N * n * itemsize (0 alone)."""
    def chunk(c):
        return n_elements // size + (1 if c % size < n_elements % size else 0)
    sent = [(rank - s) % size for s in range(size - 1)] + [(rank + 1 - s) % size
                                                           for s in range(size - 1)]
    return itemsize * sum(chunk(c) for c in sent)
