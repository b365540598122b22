"""The key/value cache of incremental decoding: what attention keeps between decoding steps.

At step t a decoder needs the keys and values of positions 1..t, but only position t is new:
KVCache keeps them per attention layer (growing by one position per step in self-attention,
computed once from the memory in encoder-decoder attention), DecoderCache holds those of a whole
decoder and reorders them for beam search. Inference only (under no_grad). Left out: paged or
quantised caches.
"""
import numpy as np

from . import backend


class KVCache:
    """The keys and values of one attention layer, kept between decoding steps (inference only).

    `k` and `v` are (B, H, T, K) arrays, no graph. Decoder self-attention appends the new positions'
    keys and values at each step (`append`, one position per step, into a buffer of `capacity`
    positions that doubles when full, so a step copies only what is new; a search that knows its
    longest output reserves that many, and no step copies the earlier positions into a larger
    buffer); encoder-decoder attention hands over the memory's keys and values once (`set`) and
    reuses them for the rest of the sentence. `reorder(index)` keeps rows `index` of the batch, in
    that order (beam search; repeated rows expand a batch into beams).

    The buffers behind k and v are laid out (capacity, B, H, K), positions first, and k, v are
    transposed views of them. Positions first, a step writes one contiguous slab and memory is
    touched only as positions fill (a reserved capacity costs nothing until used: the OS hands out
    zeroed pages on first touch); all heads of one position of one row are one contiguous block,
    which a reorder copies in one piece; and the batched products of attention read these views
    as fast.
    """

    def __init__(self, capacity=0):
        # positions to hold before the buffers must grow (0: grow as needed)
        self.capacity = capacity
        self._k = self._v = None  # (capacity, B, H, K)
        self.length = 0           # positions held

    def __len__(self):
        return self.length

    @property
    def empty(self):
        return self.length == 0

    @property
    def k(self):
        """The keys held, (B, H, T, K), or None."""
        return None if self._k is None else self._k[:self.length].transpose(1, 2, 0, 3)

    @property
    def v(self):
        """The values held, (B, H, T, K), or None."""
        return None if self._v is None else self._v[:self.length].transpose(1, 2, 0, 3)

    def set(self, k, v):
        """Hold the memory's keys and values k, v (B, H, S, K), handed over: reorder writes them."""
        self._k = k.transpose(2, 0, 1, 3)  # (S, B, H, K) views
        self._v = v.transpose(2, 0, 1, 3)
        self.length = k.shape[2]
        return k, v

    def append(self, k, v):
        """Add the keys and values (B, H, n, K) of n new positions; return all of them, each
        (B, H, T, K)."""
        B, H, n, K = k.shape
        if self._k is None or self.length + n > self._k.shape[0]:
            capacity = max(self.capacity, 16, 2 * (self.length + n))
            for name in ("_k", "_v"):
                buf = backend.xp.empty((capacity, B, H, K), dtype=k.dtype)
                if self.length:
                    buf[:self.length] = getattr(self, name)[:self.length]
                setattr(self, name, buf)
        self._k[self.length:self.length + n] = k.transpose(2, 0, 1, 3)        # (n, B, H, K)
        self._v[self.length:self.length + n] = v.transpose(2, 0, 1, 3)
        self.length += n
        return self.k, self.v

    def reorder(self, index, shared=None):
        """Keep batch rows `index` (an integer array), in that order. `shared` (optional, one
        integer per new row): the first shared[i] positions of row i already hold what row
        index[i] holds.

        Beam search calls this at every step, so it copies as little as it can, in place: only the
        positions held (not the spare capacity), only the rows that change (index[i] != i; a beam
        that keeps its row costs nothing), and of those only the positions after what they share.
        Two beams of a sentence that begin with the same tokens have the same keys and values there
        (position p sees only positions <= p), and beams mostly differ in their last few tokens. In
        place also spares allocating a new buffer each step (a large one comes fresh from the OS,
        page by page).
        """
        if self._k is not None:
            self.apply(moves(index, shared, self.length, self._k.shape[1]))

    def apply(self, plan):
        """Carry out a plan of moves(), made once for all the layers of a decoder alike."""
        if plan is None:                                   # nothing moves
            return
        index, dst, src, pos = plan
        L = self.length
        if dst is None:  # more rows: new buffers, as much spare room
            i = backend.asarray(index)
            for name in ("_k", "_v"):
                old = getattr(self, name)
                new = backend.xp.empty((old.shape[0], len(index)) + old.shape[2:], dtype=old.dtype)
                new[:L] = old[:L, i]
                setattr(self, name, new)
            return
        if len(dst):
            for buf in (self._k, self._v):                 # all read before anything is written
                if pos is None:
                    buf[:L, dst] = buf[:L, src]            # whole rows (L, moved, H, K)
                else:
                    buf[pos, dst] = buf[pos, src]          # (position, row) pairs: (P, H, K) blocks
        self._k = self._k[:, :len(index)]  # dropped rows: a view of the first
        self._v = self._v[:, :len(index)]


def moves(index, shared, length, rows):
    """What keeping rows `index` of a cache of `rows` rows and `length` positions copies
    (KVCache.reorder): None when nothing moves; (index, None, None, None) when there are more rows
    than before (new buffers); else (index, dst, src, pos) on the device: row src[j] into row
    dst[j], at position pos[j] (pos None: every position), only the rows that change
    (index[i] != i) and only the positions after the first shared[i]."""
    index = backend.to_numpy(index)                                        # decided on the host
    if len(index) == rows and (index == np.arange(rows)).all():
        return None
    if len(index) > rows:
        return index, None, None, None
    start = np.zeros(len(index), np.int64) if shared is None else np.minimum(shared, length)
    # the rows that change
    changed = np.flatnonzero((index != np.arange(len(index))) & (start < length))
    if shared is None:
        return index, backend.asarray(changed), backend.asarray(index[changed]), None
    count = length - start[changed]  # changed[j] at positions start .. length-1
    dst = np.repeat(changed, count)                                                          # (P,)
    pos = np.arange(len(dst)) - np.repeat(np.cumsum(count) - count - start[changed], count)  # (P,)
    return index, backend.asarray(dst), backend.asarray(index[dst]), backend.asarray(pos)


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
    memory row i (multihead.py). Beam search keeps one copy of a sentence's memory for its g = k
    beams this way: expanding a batch into beams is then reorder(repeat(arange(B), k),
    memory_rows=arange(B)), which copies no memory, and reordering beams within their sentence
    leaves the memory as it is. shared (one integer per new row, see KVCache.reorder): positions
    whose keys and values row i already has in self-attention, as when beams of one sentence share
    their first tokens. The layers move alike, so the moves are worked out once for all of them.
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
        index = backend.to_numpy(index)
        memory_rows = index if memory_rows is None else backend.to_numpy(memory_rows)
        kinds = ((self.self_attn, index, shared), (self.cross_attn, memory_rows, None))
        for caches, rows, common in kinds:
            filled = [c for c in caches if c._k is not None]
            if filled:
                plan = moves(rows, common, filled[0].length, filled[0]._k.shape[1])
                for c in filled:
                    c.apply(plan)
