"""Lesson 07, build it: the sinusoidal positional encodings, and the model's size from its settings.

Replace each `raise NotImplementedError` with your code, then grade it:

    python lessons/check.py 07

The grader compares with transformer.sinusoids and config.count_parameters. The answers are in
lessons/solutions/07_transformer.py; try first.
"""
import numpy as np


def sinusoids(n_positions, d_model):
    """The (n_positions, d_model) float64 table of section 3.5:
    PE(pos, 2i) = sin(pos / 10000^(2i / d_model)),
    PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))."""
    raise NotImplementedError("sinusoids: your turn")


def count_parameters(vocab_size, d_model, d_ff, n_layers):
    """The number of trained parameters (an int) of the paper's Transformer with n_layers encoder
    and n_layers decoder layers, post-LN, biases everywhere, and ONE embedding matrix shared by the
    source and target embeddings and the output projection (which has no bias). Sinusoidal
    positions: nothing to train there."""
    raise NotImplementedError("count_parameters: your turn")
