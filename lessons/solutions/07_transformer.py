"""Lesson 07, answers: the positional encodings, and the model's size from its hyperparameters.

Graded by `python lessons/check.py 07 --solutions`; your own go in
lessons/exercises/07_transformer.py.

The answers to the lesson's questions, explained, are in lessons/answers/07_transformer.md.
"""
import numpy as np


def sinusoids(n_positions, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))
    (section 3.5)."""
    pos = np.arange(n_positions)[:, None]                         # (P, 1)
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)      # (D/2,): the speed of pair i
    table = np.empty((n_positions, d_model))
    table[:, 0::2] = np.sin(pos * omega)                          # even columns: sines
    table[:, 1::2] = np.cos(pos * omega)                          # odd columns: cosines
    return table


def count_parameters(vocab_size, d_model, d_ff, n_layers):
    """V D + N (attention + ffn + 2 norms) + N (2 attentions + ffn + 3 norms), with
    attention = 4 (D^2 + D), ffn = 2 D F + F + D, norm = 2 D; the embedding is
    shared, counted once."""
    D, F, V, N = d_model, d_ff, vocab_size, n_layers
    attention = 4 * (D * D + D)                                # W^Q, W^K, W^V, W^O and their biases
    ffn = D * F + F + F * D + D                                # W_1, b_1, W_2, b_2
    norm = 2 * D                                               # gamma, beta
    return V * D + N * (attention + ffn + 2 * norm) + N * (2 * attention + ffn + 3 * norm)
