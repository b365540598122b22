"""The key/value cache of incremental decoding: what attention keeps between decoding steps.

At step t a decoder needs the keys and values of positions 1..t, but only position t is new: KVCache
keeps them per attention layer (growing by one position per step in self-attention, computed once from
the memory in encoder-decoder attention), DecoderCache holds those of a whole decoder and reorders them
for beam search. Inference only (under no_grad). Left out: paged or quantised caches.
"""
import numpy as np

from . import backend


class KVCache:
    """The keys and values of one attention layer, kept between decoding steps (inference only).

    Arrays (B, H, T, K), no graph. Decoder self-attention appends the new positions' keys and values
    at each step (`append`, one position per step, into a buffer of `capacity` positions that doubles
    when full, so a step copies only what is new; a search that knows its longest output reserves
    that many, and no step copies the earlier positions into a larger buffer); encoder-decoder
    attention stores the memory's keys and values once (`set`) and reuses them for the rest of the
    sentence. `reorder(index)` keeps rows `index` of the
    batch, in that order (beam search; repeated rows expand a batch into beams).
    """

    def __init__(self, capacity=0):
        self.capacity = capacity  # positions to hold before the buffers must grow (0: grow as needed)
        self._k = self._v = None  # (B, H, capacity, K)
        self.length = 0           # positions held
        self._own = False         # the buffers are append's own (not set's arrays): reorder may write them

    def __len__(self):
        return self.length

    @property
    def empty(self):
        return self.length == 0

    @property
    def k(self):
        return None if self._k is None else self._k[:, :, :self.length]  # (B, H, T, K)

    @property
    def v(self):
        return None if self._v is None else self._v[:, :, :self.length]  # (B, H, T, K)

    def set(self, k, v):
        """Hold exactly k, v (B, H, S, K): the memory's keys and values."""
        self._k, self._v, self.length, self._own = k, v, k.shape[2], False
        return k, v

    def append(self, k, v):
        """Add the keys and values (B, H, n, K) of n new positions; return all of them (B, H, T, K)."""
        B, H, n, K = k.shape
        if self._k is None or self.length + n > self._k.shape[2]:
            capacity = max(self.capacity, 16, 2 * (self.length + n))
            for name in ("_k", "_v"):
                buf = backend.xp.empty((B, H, capacity, K), dtype=k.dtype)
                if self.length:
                    buf[:, :, :self.length] = getattr(self, name)[:, :, :self.length]
                setattr(self, name, buf)
            self._own = True
        self._k[:, :, self.length:self.length + n] = k
        self._v[:, :, self.length:self.length + n] = v
        self.length += n
        return self.k, self.v

    def reorder(self, index, shared=None):
        """Keep batch rows `index` (an integer array), in that order. `shared` (optional, one integer
        per new row): the first shared[i] positions of row i already hold what row index[i] holds.

        Beam search calls this at every step, so it copies as little as it can, in place: only the
        positions held (not the spare capacity), only the rows that change (index[i] != i; a beam that
        keeps its row costs nothing), and of those only the positions after what they share. Two beams
        of a sentence that begin with the same tokens have the same keys and values there (position p
        sees only positions <= p), and beams mostly differ in their last few tokens. In place also
        spares allocating a new buffer each step (a large one comes fresh from the OS, page by page).
        """
        if self._k is None:
            return
        index = backend.to_numpy(index)                                  # decided on the host
        B, L = self._k.shape[0], self.length
        if len(index) == B and (index == np.arange(B)).all():           # nothing moves
            return
        if not self._own or len(index) > B:          # set's arrays (not ours to write), or more rows
            i = backend.asarray(index)
            for name in ("_k", "_v"):                  # new buffers (B', H, capacity, K), as much spare room
                old = getattr(self, name)
                setattr(self, name, backend.xp.empty((len(index),) + old.shape[1:], dtype=old.dtype))
                getattr(self, name)[:, :, :L] = old[i, :, :L]
            self._own = True
            return
        start = np.zeros(len(index), np.int64) if shared is None else np.minimum(shared, L)
        rows = np.flatnonzero((index != np.arange(len(index))) & (start < L))  # the rows that change
        if shared is None:                               # whole rows: (moved, H, T, K) slices
            dst, src, pos = backend.asarray(rows), backend.asarray(index[rows]), slice(0, L)
        else:                                            # one (row, position) pair per key and value to copy:
            count = L - start[rows]                      # rows[j] at positions start[rows[j]] .. L-1
            dst = np.repeat(rows, count)                                                        # (P,)
            pos = np.arange(len(dst)) - np.repeat(np.cumsum(count) - count - start[rows], count)  # (P,)
            dst, src, pos = backend.asarray(dst), backend.asarray(index[dst]), backend.asarray(pos)
        if len(rows):
            for buf in (self._k, self._v):
                buf[dst, :, pos] = buf[src, :, pos]      # all read before anything is written
        self._k, self._v = self._k[:len(index)], self._v[:len(index)]   # dropped rows: a view of the first ones


class DecoderCache:
    """The key/value caches of a whole decoder, for incremental decoding under no_grad.

    Per decoder layer: a KVCache for masked self-attention, which grows by one position per step,
    and one for encoder-decoder attention, filled from the memory at the first step and reused.
    `length` is the number of target positions decoded so far (the position offset of the next
    token). `reorder(index)` keeps batch rows `index` (an integer array, repeats allowed) in every
    layer: beam search selects the surviving beams with it. The caller reorders memory and src_mask
    alike (`memory[idx]`, `src_mask[idx]` with idx = backend.asarray(memory_rows)).

    memory_rows (default: index) are the rows the encoder-decoder keys and values keep. Fewer memory
    rows than rows make groups: with m memory rows and m*g rows, rows i*g .. i*g+g-1 all attend to
    memory row i (attention.py). Beam search keeps one copy of a sentence's memory for its g = k beams
    this way: expanding a batch into beams is then reorder(repeat(arange(B), k), memory_rows=arange(B)),
    which copies no memory, and reordering beams within their sentence leaves the memory as it is.
    shared (one integer per new row, see KVCache.reorder): positions whose keys and values row i
    already has in self-attention, as when beams of one sentence share their first tokens.
    """

    def __init__(self, n_layers, capacity=0):
        self.self_attn = [KVCache(capacity) for _ in range(n_layers)]
        self.cross_attn = [KVCache() for _ in range(n_layers)]

    @property
    def length(self):
        return self.self_attn[0].length if self.self_attn else 0

    def layer(self, i):
        return self.self_attn[i], self.cross_attn[i]

    def reorder(self, index, memory_rows=None, shared=None):
        index = backend.to_numpy(index)  # each KVCache decides on the host which rows move
        memory_rows = index if memory_rows is None else backend.to_numpy(memory_rows)
        for c in self.self_attn:
            c.reorder(index, shared)
        for c in self.cross_attn:
            c.reorder(memory_rows)       # the memory's keys and values: no positions in common
