"""Lesson 05, nn: xavier_bound against sqrt(6 / (d_in + d_out)), linear_backward against the
gradients of F.linear (and mt.gradcheck), and the FeedForward module against
transformer.FeedForward."""
import math

import numpy as np

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import nn, transformer

from .common import leaf, with_your_backward


def check_xavier_bound(fn, g):
    for d_in, d_out in ((512, 2048), (4, 4), (100, 28)):
        g.start(f"d_in={d_in}, d_out={d_out}")
        g.cmp("the bound", g.call(fn, d_in, d_out), math.sqrt(6 / (d_in + d_out)),
              known=xavier_bound_mistakes(d_in, d_out))


def check_linear_backward(fn, g):
    r = np.random.default_rng(50).standard_normal
    for x_shape, d_out in (((4, 3), 2), ((2, 3, 4), 5), ((2, 1, 2, 3), 1)):
        g.start(f"x {x_shape}, weight {(x_shape[-1], d_out)}")
        x, W, b, dy = r(x_shape), r((x_shape[-1], d_out)), r(d_out), r(x_shape[:-1] + (d_out,))
        leaves = [leaf(x), leaf(W), leaf(b)]
        F.linear(*leaves).backward(dy)
        dx, dW, db = g.unpack(g.call(fn, x.copy(), W.copy(), dy.copy()), ["dx", "dweight", "dbias"])
        g.cmp("dx", dx, leaves[0].grad, shape_hint="dx has x's shape: dy W^T")
        g.cmp("dweight", dW, leaves[1].grad,
              shape_hint="dweight has weight's shape (d_in, d_out): x^T dy, with x flattened to "
                         "(N, d_in)",
              known=[(leaves[1].grad / (dy.size // d_out),
                      "sum over the rows, not mean: x^T dy adds every row's x_n^T dy_n")])
        g.cmp("dbias", db, leaves[2].grad,
              shape_hint="dbias has shape (d_out,): sum dy over every leading axis",
              known=[(leaves[2].grad / (dy.size // d_out),
                      "sum dy over the leading axes, not mean: every row adds the bias")])
    g.gradcheck(lambda x, w, b: with_your_backward(F.linear,
                                                   lambda gr: tuple(fn(x.data, w.data, gr)),
                                                   [x, w, b]),
                leaf(r((2, 3, 4))), leaf(r((4, 2))), leaf(r(2)),
                case="mt.gradcheck, x (2, 3, 4), weight (4, 2)")


def check_feedforward(cls, g):
    rng = np.random.default_rng(51)
    for d_model, d_ff, lead in ((4, 8, (2, 3)), (6, 10, (5,)), (3, 5, (1, 2, 2))):
        g.start(f"FeedForward({d_model}, {d_ff}) on x {lead + (d_model,)}")
        mt.seed(0)
        layer = g.call(cls, d_model, d_ff)
        if not isinstance(layer, nn.Module):
            g.fail("FeedForward must subclass nn.Module")
        names = [(n, tuple(p.shape)) for n, p in layer.named_parameters()]
        expected = [("w_1.weight", (d_model, d_ff)), ("w_1.bias", (d_ff,)),
                    ("w_2.weight", (d_ff, d_model)), ("w_2.bias", (d_model,))]
        if names != expected:
            g.fail(f"parameters {names}, expected {expected}: two nn.Linear layers named w_1 and "
                   f"w_2")
        reference = transformer.FeedForward(d_model, d_ff)
        for (_, p), (_, q) in zip(layer.named_parameters(), reference.named_parameters()):
            p.data = rng.standard_normal(p.shape)            # random biases too: the ReLU must bite
            q.data = p.data.copy()
        x = rng.standard_normal(lead + (d_model,))
        out = g.call(layer, mt.tensor(x))
        g.cmp("the output", out, reference(mt.tensor(x)).numpy(),
              known=feedforward_mistakes(x, *(p.data for p in reference.parameters())))
        g.gradcheck(lambda x, *params: layer(x), leaf(x), *layer.parameters())


# ----------------------------------------------------------- known mistakes: [(wrong answer, hint)]
def xavier_bound_mistakes(d_in, d_out):
    return [(math.sqrt(6 / d_in),
             "use d_in + d_out: Glorot's compromise between the forward and backward pass"),
            (math.sqrt(6 / d_out),
             "use d_in + d_out: Glorot's compromise between the forward and backward pass"),
            (math.sqrt(2 / (d_in + d_out)),
             "that is the standard deviation; U(-a, a) has variance a^2 / 3, so a = sqrt(6 / (d_in "
             "+ d_out))")]


def feedforward_mistakes(x, W1, b1, W2, b2):
    return [((x @ W1 + b1) @ W2 + b2,
             "put a ReLU between the two layers: max(0, x W1 + b1) W2 + b2"),
            (np.maximum((np.maximum(x @ W1 + b1, 0)) @ W2 + b2, 0),
             "no ReLU after the second layer")]


ITEMS = [("xavier_bound", check_xavier_bound), ("linear_backward", check_linear_backward),
         ("FeedForward", check_feedforward)]
