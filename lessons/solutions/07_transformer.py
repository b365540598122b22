"""Lesson 07, answers: the positional encodings, and the model's size from its hyperparameters.

Graded by `python lessons/check.py 07 --solutions`; your own go in lessons/exercises/07_transformer.py.

Answers to the lesson's questions:
1. With share_embeddings=False, two more V x D matrices: 63,082,496 + 2 * 37000 * 512 = 100,970,496.
2. PE_pos . PE_(pos+k) = sum_i (sin a sin b + cos a cos b) = sum_i cos(k omega_i), with a = pos omega_i,
   b = (pos + k) omega_i: a function of k alone.
3. Two learned tables of max_len x d_model: 2 * 1024 * 512 = 1,048,576 parameters.
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
