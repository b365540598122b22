"""The Transformer of "Attention Is All You Need" (Figure 1): its configuration, positional
encodings, the feed-forward sub-layer, encoder and decoder layers and stacks, and the assembled
model with one embedding matrix shared by source, target and the pre-softmax projection.

Shapes (the legend for the whole package): B batch, S source length, T target length, D d_model,
H heads, K = D/H head size, F d_ff, V vocabulary. Token ids are integer arrays (B, S) / (B, T);
masks are boolean arrays, True where attention is allowed, broadcastable to (B, H, T_q, T_k)
(see attention.py).
Left out on purpose: anything not in the paper but the flagged options (pre-LN, learned positions,
untied embeddings, dropout on attention weights and inside the FFN), which are all off by default.
"""
import math

import numpy as np

from . import backend
from . import functional as F
from . import nn
from .attention import causal_mask, padding_mask
from .multihead import MultiHeadAttention
from .cache import DecoderCache
from .checks import check_ids
from .config import TransformerConfig, count_parameters  # noqa: F401  (re-exported)
from .tensor import data_of


# -------------------------------------------------------------------- building blocks
class PositionalEncoding(nn.Module):
    """x + PE[offset : offset + T], with PE(pos, 2i) = sin(pos / 10000^(2i/D)) and
    PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    Section 3.5. The table (max_len, D) is computed once. `offset` is the position of x's first
    token (incremental decoding: the number of positions already decoded). learned=True makes the
    table a trained Parameter instead (Note: Table 3 row E; the paper keeps the sinusoids), drawn
    from N(0, D^-1/2) like the embeddings.
    """

    def __init__(self, d_model, max_len=1024, learned=False):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.learned = learned
        if learned:
            table = backend.host_rng().normal(0.0, d_model ** -0.5, (max_len, d_model))
            self.table = nn.Parameter(table)
        else:
            table = sinusoids(max_len, d_model)  # (max_len, D)
            self.table = backend.asarray(table, dtype=backend.DEFAULT_DTYPE)

    def forward(self, x, offset=0):
        T = x.shape[1]
        if offset + T > self.max_len:
            raise ValueError(f"positions {offset}..{offset + T - 1} exceed max_len={self.max_len}: "
                             f"raise TransformerConfig.max_len or shorten the sequence")
        return x + self.table[offset:offset + T]                          # (B, T, D) + (T, D)

    def extra_repr(self):
        return f"{self.d_model}, max_len={self.max_len}, learned={self.learned}"


def sinusoids(n_positions, d_model):
    """The (n_positions, D) float64 table of section 3.5: sines at even, cosines at odd columns.

    sinusoids(2, 2) -> [[sin 0, cos 0], [sin 1, cos 1]]
    """
    pos = np.arange(n_positions, dtype=np.float64)[:, None]              # (P, 1)
    # (D/2,): 1/10000^(2i/D)
    freq = 10000.0 ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    table = np.empty((n_positions, d_model))
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq)
    return table


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2), applied to every position alike.

    relu_dropout: dropout on the hidden ReLU activations (Note: not in the paper, nor in
    tensor2tensor's transformer_base_v1, which sets relu_dropout = 0; later tensor2tensor versions,
    the Annotated Transformer and PyTorch's nn.Transformer put one there). 0 by default.
    """

    def __init__(self, d_model, d_ff, relu_dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(relu_dropout)

    def forward(self, x):
        # (B, T, D) -> (B, T, F) -> (B, T, D)
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


def _sublayer(x, norm, dropout, fn, norm_first):
    """Post-LN LayerNorm(x + Dropout(Sublayer(x))) (section 3.1, 5.4), or pre-LN
    x + Dropout(Sublayer(LayerNorm(x)))."""
    if norm_first:  # Note: pre-LN, not in the paper
        return x + dropout(fn(norm(x)))
    return norm(x + dropout(fn(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then the FFN, each wrapped in a residual connection and LayerNorm."""

    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout,
                                            self_attention=True)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.relu_dropout)
        self.norm_1 = nn.LayerNorm(c.d_model, c.layer_norm_eps)
        self.norm_2 = nn.LayerNorm(c.d_model, c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.norm_first = c.norm_first

    def forward(self, x, src_mask=None):
        x = _sublayer(x, self.norm_1, self.dropout,
                      lambda h: self.self_attn(h, mask=src_mask), self.norm_first)
        return _sublayer(x, self.norm_2, self.dropout, self.ffn, self.norm_first)  # (B, S, D)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention over the memory, then the FFN; each
    wrapped in a residual connection and LayerNorm. `cache`: (self KVCache, encoder-decoder
    KVCache) or None."""

    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout,
                                            self_attention=True)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout,
                                             self_attention=False)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.relu_dropout)
        self.norm_1 = nn.LayerNorm(c.d_model, c.layer_norm_eps)
        self.norm_2 = nn.LayerNorm(c.d_model, c.layer_norm_eps)
        self.norm_3 = nn.LayerNorm(c.d_model, c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.norm_first = c.norm_first

    def forward(self, y, memory, src_mask=None, tgt_mask=None, cache=None):
        self_cache, cross_cache = (None, None) if cache is None else cache
        y = _sublayer(y, self.norm_1, self.dropout,
                      lambda h: self.self_attn(h, mask=tgt_mask, cache=self_cache), self.norm_first)
        y = _sublayer(y, self.norm_2, self.dropout,
                      lambda h: self.cross_attn(h, memory, mask=src_mask, cache=cross_cache),
                      self.norm_first)
        return _sublayer(y, self.norm_3, self.dropout, self.ffn, self.norm_first)  # (B, T, D)


class Encoder(nn.Module):
    """N EncoderLayers; with norm_first a final LayerNorm (Note: pre-LN only, not in the paper)."""

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.norm = _final_norm(config)

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)
        return x if self.norm is None else self.norm(x)                    # (B, S, D)


class Decoder(nn.Module):
    """N DecoderLayers; with norm_first a final LayerNorm (Note: pre-LN only, not in the paper)."""

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.norm = _final_norm(config)

    def forward(self, y, memory, src_mask=None, tgt_mask=None, cache=None):
        for i, layer in enumerate(self.layers):
            y = layer(y, memory, src_mask, tgt_mask, None if cache is None else cache.layer(i))
        return y if self.norm is None else self.norm(y)                    # (B, T, D)


def _final_norm(config):
    """The LayerNorm after a stack of pre-LN layers; None for post-LN (the paper's)."""
    return nn.LayerNorm(config.d_model, config.layer_norm_eps) if config.norm_first else None


# -------------------------------------------------------------------- the model
class Transformer(nn.Module):
    """The encoder-decoder of Figure 1. Inputs are token ids; outputs are logits (B, T, V).

    One (V, D) matrix serves as source embedding, target embedding and pre-softmax projection
    (section 3.4: logits = h E^T, one GEMM over (B*T, D)); embeddings are multiplied by sqrt(D),
    positions added, then dropout. share_embeddings=False gives separate source and target
    embeddings and an output projection (Note: a deviation from the paper).

    Training: `model.loss(src, tgt_in, tgt_out)` (tgt_in = <s> y, tgt_out = y </s>). Decoding
    (search.py, lesson 10): encode() once, then decode() one new token at a time with the
    DecoderCache of init_cache(), under model.inference_mode().
    """

    def __init__(self, config):
        super().__init__()
        c = self.config = config
        self.src_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.tgt_embed = self.src_embed
        self.out_proj = None
        if not c.share_embeddings:
            self.tgt_embed = nn.Embedding(c.vocab_size, c.d_model)
            # Note: untied embeddings only; the paper ties the output projection to the embeddings
            self.out_proj = nn.Linear(c.d_model, c.vocab_size, bias=False)
        learned = c.positional == "learned"
        self.src_pos = PositionalEncoding(c.d_model, c.max_len, learned)
        self.tgt_pos = PositionalEncoding(c.d_model, c.max_len, learned)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)

    def extra_repr(self):
        c = self.config
        return (f"vocab_size={c.vocab_size}, d_model={c.d_model}, n_heads={c.n_heads}, "
                f"parameters={self.num_parameters():,}")

    def _embed(self, ids, embed, pos, offset=0):
        """Dropout(E[ids] * sqrt(D) + PE): section 3.4 and 3.5, dropout of section 5.4."""
        x = embed(ids) * math.sqrt(self.config.d_model)                  # (B, T, D)
        return self.dropout(pos(x, offset))

    def encode(self, src, src_mask=None):
        """src (B, S) ids -> memory (B, S, D). src_mask defaults to the padding mask of src."""
        src = _ids(src, self.config.vocab_size)
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)              # (B, 1, 1, S)
        return self.encoder(self._embed(src, self.src_embed, self.src_pos), src_mask)

    def decode(self, tgt_in, memory, src_mask=None, tgt_mask=None, cache=None):
        """tgt_in (B, T) ids, memory (B, S, D) -> logits (B, T, V).

        Without a cache, tgt_mask defaults to causal AND the padding mask of tgt_in. With a cache
        (a DecoderCache from init_cache(), under no_grad), tgt_in holds only the new positions,
        which sit at positions cache.length onwards; tgt_mask=None then means that one new token
        sees every cached position, and several new tokens get a causal mask offset by the cache.
        """
        tgt_in = _ids(tgt_in, self.config.vocab_size)
        # with a cache, beams share a sentence's memory
        if cache is None and tgt_in.shape[0] != memory.shape[0]:
            raise ValueError(f"tgt_in has {tgt_in.shape[0]} sentences but the memory has "
                             f"{memory.shape[0]}: each target must face its own source")
        T = tgt_in.shape[1]
        offset = 0 if cache is None else cache.length
        if tgt_mask is None:
            if cache is None:
                tgt_mask = causal_mask(T) & padding_mask(tgt_in, self.config.pad_id)  # (B, 1, T, T)
            elif T > 1:
                tgt_mask = causal_mask(T, offset)                         # (1, 1, T, offset+T)
        y = self._embed(tgt_in, self.tgt_embed, self.tgt_pos, offset)     # (B, T, D)
        return self.project(self.decoder(y, memory, src_mask, tgt_mask, cache))

    def project(self, h):
        """Decoder output (B, T, D) -> logits (B, T, V): h E^T with the shared matrix, one GEMM."""
        B, T, D = h.shape
        h = h.reshape(B * T, D)                                           # (B*T, D)
        if self.out_proj is None:
            logits = h @ self.tgt_embed.weight.T                          # (B*T, V)
        else:
            logits = self.out_proj(h)
        return logits.reshape(B, T, self.config.vocab_size)

    def forward(self, src, tgt_in, src_mask=None, tgt_mask=None):
        """src (B, S), tgt_in (B, T) ids -> logits (B, T, V); masks from pad_id when not given."""
        src = _ids(src, self.config.vocab_size)
        tgt_in = _ids(tgt_in, self.config.vocab_size)
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"src has {src.shape[0]} sentences but tgt_in has {tgt_in.shape[0]}: "
                             f"each target must face its own source")
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask, tgt_mask)

    def loss(self, src, tgt_in, tgt_out, src_mask=None, tgt_mask=None, return_count=False,
             label_smoothing=None):
        """Label-smoothed cross-entropy of the logits against tgt_out (B, T), averaged over non-pad
        target tokens; eps_ls is the config's unless label_smoothing is given (0.0 for validation).
        return_count=True also gives that token count."""
        eps = self.config.label_smoothing if label_smoothing is None else label_smoothing
        tgt_in = _ids(tgt_in, self.config.vocab_size)
        tgt_out = _ids(tgt_out, self.config.vocab_size, "tgt_out", "classes")
        if tgt_out.shape != tgt_in.shape:
            raise ValueError(f"tgt_out has shape {tuple(tgt_out.shape)} but tgt_in has "
                             f"{tuple(tgt_in.shape)}: "
                             "they are the same sentences, y </s> and <s> y")
        logits = self.forward(src, tgt_in, src_mask, tgt_mask)
        return F.cross_entropy(logits, tgt_out, ignore_index=self.config.pad_id,
                               label_smoothing=eps, return_count=return_count)

    def init_cache(self, capacity=0):
        """An empty DecoderCache for incremental decoding (see the class docstring); capacity: the
        target positions to reserve room for (search: the longest output + 1), so that no step
        grows a buffer."""
        return DecoderCache(self.config.n_decoder_layers, capacity)


def _ids(x, vocab_size, what="embedding", of="embeddings"):
    """Token ids as an integer array (B, L) on the current backend (from a Tensor, list or array).
    Host ids bound for a GPU are range-checked here, before they travel: there the embedding and
    cross_entropy see device arrays, which they do not check (a sync); on the CPU they check the
    ids themselves."""
    ids = data_of(x)
    ids = np.asarray(ids) if backend.device_of(ids) == "cpu" else ids
    if ids.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"token ids must have shape (batch, length), got {tuple(ids.shape)}")
    if ids.shape[1] == 0:
        raise ValueError(f"token ids must hold at least one position, got shape {tuple(ids.shape)}")
    if backend.device == "gpu":
        check_ids(ids, vocab_size, what, of)
    return backend.asarray(ids)
