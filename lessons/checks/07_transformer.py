"""Lesson 07, transformer: sinusoids against transformer.sinusoids (the positional encodings), and
count_parameters against config.count_parameters of TransformerConfig.base, exactly."""
import numpy as np

from minitransformer import config, transformer


def check_sinusoids(fn, g):
    for n, d in ((10, 4), (50, 16), (3, 2), (1024, 512)):      # the last: the base model's max_len
        g.start(f"{n} positions, d_model={d}")
        ref = transformer.sinusoids(n, d)
        yours = g.call(fn, n, d)
        if isinstance(yours, np.ndarray) and yours.dtype == np.float32:
            g.fail("the table is float32: return a float64 table (float32 rounds at 1e-7; the "
                   "model casts it to its own dtype)")
        g.cmp("the table", yours, ref, known=sinusoids_mistakes(ref, n, d))


def check_count_parameters(fn, g):
    for V, D, F_, N in ((37000, 512, 2048, 6), (37000, 1024, 4096, 6), (13, 32, 64, 1),
                        (1000, 64, 256, 3)):
        g.start(f"vocabulary {V}, d_model {D}, d_ff {F_}, {N} + {N} layers")
        ref = config.count_parameters(config.TransformerConfig.base(vocab_size=V, d_model=D,
                                                                    d_ff=F_, n_layers=N))
        got = g.call(fn, V, D, F_, N)
        if not isinstance(got, (int, np.integer)):
            g.fail(f"return an int, got {type(got).__name__}")
        if int(got) != ref:
            known = {}                        # two mistakes may be off by the same count: name both
            for diff, why in count_parameters_mistakes(V, D, F_, N):
                known[diff] = f"{known[diff]}; or {why}" if diff in known else why
            hint = known.get(int(got) - ref,
                             "add up: embedding, N encoder layers, N decoder layers")
            g.fail(f"{int(got):,}, expected {ref:,} (yours is off by {int(got) - ref:+,}); {hint}")


# -------------------------------------------------------------- known mistakes
def sinusoids_mistakes(ref, n, d):
    """[(wrong table, hint)]."""
    pos, i = np.arange(n)[:, None], np.arange(0, d, 2)
    swapped, slow = np.empty((n, d)), np.empty((n, d))
    swapped[:, 0::2], swapped[:, 1::2] = ref[:, 1::2], ref[:, 0::2]
    slow[:, 0::2] = np.sin(pos * 10000.0 ** (-i / 2 / d))
    slow[:, 1::2] = np.cos(pos * 10000.0 ** (-i / 2 / d))
    later = transformer.sinusoids(n + 1, d)[1:]
    return [(swapped, "even columns are sines, odd columns cosines"),
            (slow,
             "the exponent is 2i / d_model, with i the index of the pair of columns (2i, 2i + 1)"),
            (np.concatenate([ref[:, 0::2], ref[:, 1::2]], axis=1),
             "interleave them: sine and cosine of pair i in columns 2i and 2i + 1, not all the "
             "sines and then all the cosines"),
            (later, "positions count from 0: row 0 is sin 0, cos 0, ... = 0, 1, 0, 1, ..."),
            (ref.astype(np.float32), "a float64 table: float32 rounds at 1e-7")]


def count_parameters_mistakes(V, D, F_, N):
    """[(yours - the right count, hint)]."""
    attention, norm = 4 * (D * D + D), 2 * D
    shared = ("the embedding matrix is shared by both embeddings and the output projection: count "
              "V * D once")
    return [(V * D, shared), (2 * V * D, shared),
            (-V * D, "count the shared embedding matrix, V * D"),
            (-N * attention,
             "a decoder layer has two attentions: masked self-attention and encoder-decoder"),
            (-N * norm, "a decoder layer has three LayerNorms, an encoder layer two"),
            (-5 * N * D, "each LayerNorm has gamma and beta: 2 d_model parameters"),
            (-5 * N * norm, "count the LayerNorms: two per encoder layer, three per decoder layer"),
            (-(3 * N * 4 * D + 2 * N * (F_ + D)), "count the biases too"),
            (-2 * N * (F_ + D),
             "each feed-forward network has two biases: b_1 (d_ff) and b_2 (d_model)"),
            (V, "the output projection has no bias: it is the shared embedding matrix, transposed")]


ITEMS = [("sinusoids", check_sinusoids), ("count_parameters", check_count_parameters)]
