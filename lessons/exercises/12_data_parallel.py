"""Lesson 12, build it: the weights of a data-parallel rank's batches, the ring allreduce, and what
it sends.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 12

Everything here runs in one process: a simulated rank is an entry of a list (no MPI needed). The
grader checks your weights against the mean over every token of random updates, your ring's sums
against float64 sums and across the ranks bit for bit, and the bytes against a count of the ring's
messages. The answers are in lessons/solutions/12_data_parallel.py; try first.
"""
import numpy as np


def shard_weights(token_counts, rank, size, average=False):
    """The weights rank `rank` of `size` gives the mean losses of its batches (lesson
    12, section 1).

    token_counts: the target-token counts n_i of ALL the update's batches, in order (accum * size
    ints, the same list on every rank). The rank runs batches rank, rank + size, rank + 2 * size,
    ...; return the weight of each of them, in that order (a list or array of floats), such that the
    allreduce of the ranks' weighted mean losses (and so of their gradients) is the mean loss over
    every target token of the update. The allreduce sums the ranks' values; with average=True it
    averages them (their sum divided by size), as PyTorch's DistributedDataParallel does."""
    raise NotImplementedError("shard_weights: your turn")


def ring_allreduce(arrays):
    """What each of N simulated ranks holds after the ring allreduce of lesson 12, section 3.

    arrays[r] is rank r's array (all of one shape and dtype; any shape, any size, even fewer
    elements than ranks); leave them unchanged. Return a list of N NEW arrays (none of them an
    input, none shared between two ranks), entry r what rank r holds at the end: the sum, in the
    inputs' shape and dtype, with the very bits the ring gives: the flat arrays cut into N chunks by
    np.array_split, and each chunk summed in the order the ring's messages add it."""
    raise NotImplementedError("ring_allreduce: your turn")


def ring_bytes_sent(n_elements, itemsize, size, rank=0):
    """How many bytes rank `rank` of `size` sends, in both phases, in the ring allreduce of an array
    of n_elements elements of itemsize bytes each: the ring of ring_allreduce, chunks by
    np.array_split (n_elements need not be a multiple of size: then the chunks
    differ by one element)."""
    raise NotImplementedError("ring_bytes_sent: your turn")
