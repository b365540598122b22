"""Lesson 12, build it: the weights of a data-parallel rank's batches, the ring allreduce, and what
it sends.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 12

Everything here runs in one process: a simulated rank is an entry of a list (no MPI needed). The grader
checks your weights against the mean over every token of random updates, your ring's sums against float64
sums and across the ranks bit for bit, and the bytes against a count of the ring's messages. The answers
are in lessons/solutions/12_data_parallel.py; try first.
"""
import numpy as np


def shard_weights(token_counts, rank, size):
    """The weights rank `rank` of `size` gives the mean losses of its batches (lesson 12, section 1).

    token_counts: the target-token counts n_i of ALL the update's batches, in order (accum * size ints,
    the same list on every rank). The rank runs batches rank, rank + size, rank + 2 * size, ...; return
    the weight of each of them, in that order (a list or array of floats), such that the ranks' weighted
    mean losses, added up over all ranks, are the mean loss over every target token of the update."""
    raise NotImplementedError("shard_weights: your turn")


def ring_allreduce(arrays):
    """Sum N arrays by the ring allreduce of section 3, simulated: arrays[r] is rank r's (all of one shape
    and dtype; any shape, any size, even fewer elements than ranks). Return a list of N new arrays, entry
    r what rank r holds at the end: the sum, with the inputs' shape and dtype. Leave the inputs unchanged.

    Cut each flat array into N chunks (np.array_split). Reduce-scatter, N - 1 steps: at step s every rank
    r sends its chunk (r - s) % N to rank (r + 1) % N, which adds it to its own copy of that chunk. Then
    all-gather, N - 1 steps: at step s every rank r sends its chunk (r + 1 - s) % N, now finished, to
    rank (r + 1) % N, which copies it. Within a step, every rank sends before any receives."""
    raise NotImplementedError("ring_allreduce: your turn")


def ring_bytes_sent(n_elements, itemsize, size):
    """How many bytes each rank sends in the ring allreduce of an array of n_elements elements of itemsize
    bytes each, over `size` ranks (n_elements a multiple of size, so the chunks are all equal)."""
    raise NotImplementedError("ring_bytes_sent: your turn")

