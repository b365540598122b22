"""Lesson 05, answers: Xavier's bound, the Linear layer's backward, and a Module of your own.

Graded by `python lessons/check.py 05 --solutions`; your own go in lessons/exercises/05_nn.py.

Answers to the lesson's questions:
1. Linear(512, 2048): 512 * 2048 + 2048 = 1,050,624; the FFN adds Linear(2048, 512), 2048 * 512 + 512:
   2,099,712 in all.
2. xavier_bound(512, 2048) = sqrt(6 / 2560) ~ 0.0484.
3. 11 entries instead of 12: the shared weight is stored once.
4. It would subtract 0.5 * grad from it twice per step: a double learning rate for that one matrix (and a
   gradient already summed over both uses). Listing it once makes it one parameter with one update.
5. Var(y) = d Var(W) Var(x) = 128 Var(x): the standard deviation grows sqrt(128) ~ 11.3 times per layer,
   11.3^20 ~ 1e21 after 20 layers (the lesson measured more than 1e10).
6. Dropout stays off: the model trains without its regularisation, deterministically, and nothing fails
   or warns. Training curves look fine; the model may overfit more than the recipe's.
7. Each logit is a sum of d products h_j E_vj, of variance 1 * 1/d each: variance 1, standard deviation 1.
   Logits of unit size give a softmax spread over many tokens, a loss near log V at the start.
8. The model would be left half new, half old: wrong, with nothing to show it if the caller caught the
   error and went on. Checking everything first makes a load all or nothing.
"""
import math

import numpy as np

import minitransformer as mt
from minitransformer import nn


def xavier_bound(d_in, d_out):
    """a = sqrt(6 / (d_in + d_out)): U(-a, a) has variance a^2 / 3 = 2 / (d_in + d_out) (Glorot's compromise)."""
    return math.sqrt(6.0 / (d_in + d_out))


def linear_backward(x, weight, dy):
    """dx = dy W^T, dW = X^T dY over the flattened rows, db = sum(dy over every leading axis)."""
    d_in, d_out = weight.shape
    X, G = x.reshape(-1, d_in), dy.reshape(-1, d_out)              # (N, d_in), (N, d_out)
    return dy @ weight.T, X.T @ G, G.sum(axis=0)                   # (..., d_in), (d_in, d_out), (d_out,)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2): two Linear layers, w_1 and w_2, with a ReLU between."""

    def __init__(self, d_model, d_ff):
        super().__init__()                                          # first: it makes the registries
        self.w_1 = nn.Linear(d_model, d_ff)                         # registered as w_1.weight, w_1.bias
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())                         # (..., D) -> (..., F) -> (..., D)


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    mt.seed(0)
    ffn = FeedForward(512, 2048)
    assert ffn.w_1.num_parameters() == 1_050_624 and ffn.num_parameters() == 2_099_712
    assert np.abs(ffn.w_1.weight.numpy()).max() <= xavier_bound(512, 2048) < 0.0485
    six = nn.ModuleList([nn.Linear(4, 4) for _ in range(6)])
    six[5].weight = six[0].weight
    assert len(six.state_dict()) == 11
    s = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])                                      # 4
    s[1].weight = s[0].weight
    assert len(list(s.parameters())) == 3                   # one weight, two biases
    rng = np.random.default_rng(0)                                                                # 5
    x = rng.standard_normal((256, 128))
    assert 10 < (x @ rng.standard_normal((128, 128))).std() / x.std() < 13
    E = rng.normal(0, 128 ** -0.5, (1000, 128))                                                   # 7
    assert 0.9 < (rng.standard_normal((64, 128)) @ E.T).std() < 1.1
