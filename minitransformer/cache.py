"""The key/value cache of incremental decoding: what attention keeps between decoding steps.

At step t a decoder needs the keys and values of positions 1..t, but only position t is new: KVCache
keeps them per attention layer (growing by one position per step in self-attention, computed once from
the memory in encoder-decoder attention), DecoderCache holds those of a whole decoder and reorders them
for beam search. Inference only (under no_grad). Left out: paged or quantised caches.
"""
from . import backend


class KVCache:
    """The keys and values of one attention layer, kept between decoding steps (inference only).

    Arrays (B, H, T, K), no graph. Decoder self-attention appends the new positions' keys and values
    at each step (`append`, one position per step; a buffer that doubles its capacity, so a step
    copies only what is new); encoder-decoder attention stores the memory's keys and values once
    (`set`) and reuses them for the rest of the sentence. `reorder(index)` keeps rows `index` of the
    batch, in that order (beam search; repeated rows expand a batch into beams).
    """

    def __init__(self):
        self._k = self._v = None  # (B, H, capacity, K)
        self.length = 0           # positions held

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
        self._k, self._v, self.length = k, v, k.shape[2]
        return k, v

    def append(self, k, v):
        """Add the keys and values (B, H, n, K) of n new positions; return all of them (B, H, T, K)."""
        B, H, n, K = k.shape
        if self._k is None or self.length + n > self._k.shape[2]:
            capacity = max(16, 2 * (self.length + n))
            for name in ("_k", "_v"):
                buf = backend.xp.empty((B, H, capacity, K), dtype=k.dtype)
                if self.length:
                    buf[:, :, :self.length] = getattr(self, name)[:, :, :self.length]
                setattr(self, name, buf)
        self._k[:, :, self.length:self.length + n] = k
        self._v[:, :, self.length:self.length + n] = v
        self.length += n
        return self.k, self.v

    def reorder(self, index):
        """Keep batch rows `index` (an integer array), in that order."""
        if self._k is not None:
            index = backend.asarray(index)
            self._k, self._v = self._k[index], self._v[index]


class DecoderCache:
    """The key/value caches of a whole decoder, for incremental decoding under no_grad.

    Per decoder layer: a KVCache for masked self-attention, which grows by one position per step,
    and one for encoder-decoder attention, filled from the memory at the first step and reused.
    `length` is the number of target positions decoded so far (the position offset of the next
    token). `reorder(index)` keeps batch rows `index` (an integer array, repeats allowed) in every
    layer: beam search selects the surviving beams with it, and expands a batch into beams with
    index = repeat(arange(B), beam_size). The caller reorders memory and src_mask alike
    (`memory[idx]`, `src_mask[idx]` with idx = backend.asarray(index), an array of the current
    backend). include_memory=False skips the encoder-decoder keys and
    values: correct only when every row of `index` comes from a row of the same source sentence
    (beams reordered within their sentence), and then memory and src_mask need no reordering either.
    """

    def __init__(self, n_layers):
        self.self_attn = [KVCache() for _ in range(n_layers)]
        self.cross_attn = [KVCache() for _ in range(n_layers)]

    @property
    def length(self):
        return self.self_attn[0].length if self.self_attn else 0

    def layer(self, i):
        return self.self_attn[i], self.cross_attn[i]

    def reorder(self, index, include_memory=True):
        index = backend.asarray(index)
        for c in self.self_attn + (self.cross_attn if include_memory else []):
            c.reorder(index)
