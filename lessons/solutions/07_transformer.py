"""Lesson 07, answers: the positional encodings, and the model's size from its hyperparameters.

Graded by `python lessons/check.py 07 --solutions`; your own go in lessons/exercises/07_transformer.py.

Answers to the lesson's questions:
1. With share_embeddings=False, two more V x D matrices: 63,082,496 + 2 * 37000 * 512 = 100,970,496.
2. PE_pos . PE_(pos+k) = sum_i (sin a sin b + cos a cos b) = sum_i cos(k omega_i), with a = pos omega_i,
   b = (pos + k) omega_i: a function of k alone.
3. Two learned tables of max_len x d_model: 2 * 1024 * 512 = 1,048,576 parameters.
4. The feed-forward network, twice over: attention 4 (512^2 + 512) = 1,050,624; FFN 2 * 512 * 2048 +
   2048 + 512 = 2,099,712 (LayerNorms: 2 * 1,024).
5. With the causal mask, position t would see the very token it must predict: the model learns to copy
   its input, the loss falls to about 0, and it has learnt nothing about the next word. When translating
   there is no next word to read: the decoder only has the tokens it produced so far.
6. No: encoder-decoder attention has no causal mask, so every target position attends to the whole
   memory, and every source token changes every position's logits (the lesson's tiny model shows it).
7. In post-LN each sub-layer ends in a LayerNorm, so the stack's output is already normalised. In pre-LN
   the residual stream x + Sublayer(LayerNorm(x)) is never normalised and grows with depth: the final
   LayerNorm brings it to unit scale before the output projection.
8. omega = 10000^(-510/512) ~ 1.04e-4 rad per position: a wavelength 2 pi / omega ~ 60,600 positions.
"""
import numpy as np

from minitransformer.config import TransformerConfig, count_parameters as package_count


def sinusoids(n_positions, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) (section 3.5)."""
    pos = np.arange(n_positions)[:, None]                         # (P, 1)
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)      # (D/2,): the speed of pair i
    table = np.empty((n_positions, d_model))
    table[:, 0::2] = np.sin(pos * omega)                          # even columns: sines
    table[:, 1::2] = np.cos(pos * omega)                          # odd columns: cosines
    return table


def count_parameters(vocab_size, d_model, d_ff, n_layers):
    """V D + N (attention + ffn + 2 norms) + N (2 attentions + ffn + 3 norms), with
    attention = 4 (D^2 + D), ffn = 2 D F + F + D, norm = 2 D; the embedding is shared, counted once."""
    D, F, V, N = d_model, d_ff, vocab_size, n_layers
    attention = 4 * (D * D + D)                                   # W^Q, W^K, W^V, W^O and their biases
    ffn = D * F + F + F * D + D                                   # W_1, b_1, W_2, b_2
    norm = 2 * D                                                  # gamma, beta
    return V * D + N * (attention + ffn + 2 * norm) + N * (2 * attention + ffn + 3 * norm)


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    base = TransformerConfig.base()
    assert package_count(TransformerConfig.base(share_embeddings=False)) == 63_082_496 + 2 * 37000 * 512
    pe, k = sinusoids(100, 16), 9
    omega = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    assert np.allclose((pe[:-k] * pe[k:]).sum(1), np.cos(k * omega).sum())
    assert package_count(TransformerConfig.base(positional="learned")) - package_count(base) == 2 * 1024 * 512
    D, F = 512, 2048                                                                              # 4
    assert 4 * (D * D + D) == 1_050_624 and 2 * D * F + F + D == 2_099_712
    import minitransformer as mt                                                                  # 6
    from minitransformer.transformer import Transformer
    mt.seed(0)
    model = Transformer(TransformerConfig.tiny(vocab_size=13, d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                               dropout=0.0)).eval()
    tgt_in = np.array([[1, 5, 6, 7]])
    with mt.no_grad():
        before, after = (model(np.array([src]), tgt_in).numpy() for src in ([5, 6, 7, 8], [5, 6, 9, 8]))
    assert (np.abs(after - before).max(axis=-1) > 1e-3).all()            # every position changed
    omega = 10000.0 ** (-510 / 512)                                                               # 8
    assert 1.03e-4 < omega < 1.04e-4 and 60_500 < 2 * np.pi / omega < 60_700
