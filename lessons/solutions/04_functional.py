"""Lesson 04, answers: fused ops, their backward passes derived by hand.

Graded by `python lessons/check.py 04 --solutions`; your own go in lessons/exercises/04_functional.py.
NumPy arrays in, NumPy arrays out; the grader wraps your backward around the package's forward and
runs mt.gradcheck on it.

Answers to the lesson's questions:
1. sum_j dx_j = sum_j y_j dy_j - (sum_j y_j)(sum_i dy_i y_i) = 0 since sum_j y_j = 1: softmax does not
   change when a constant is added to every input, so its gradient has no component along (1, ..., 1).
2. H(q) with q = (0.925, 0.025, 0.025, 0.025): about 0.3488 nats (lesson 09's loss_floor(4, 0.1)).
3. With D = 1, x - mu = 0, so xhat = 0 and y = beta whatever x is; dx = 0.
4. exp(-200) is about 1.4e-87, below float32's smallest number (1.4e-45): the softmax gives exactly 0,
   and log 0 = -inf. log_softmax computes x - lse(x) = (0, -200) without ever forming the small number.
5. 0: p and q each sum to 1. Raising one logit's probability lowers the others' by as much: adding the
   same constant to every logit changes nothing, and the gradient has no component along (1, ..., 1).
6. It would be half as large: the mean over 6 with zeros in 3 rows. The direction is right, but the
   step size would then depend on how much padding each batch happens to hold, a learning rate that
   changes from batch to batch for no reason. Dividing by the n counted rows keeps each token's weight 1/n.
7. Scatter-add: dW[4] = 2 (both occurrences). Assignment keeps only the last write: dW[4] = 1, and the
   first occurrence's gradient is silently lost.
8. y is 0 or 2 (x / (1 - p)), each with probability 1/2: mean 1 = x, variance 1 (p / (1 - p) x^2).
   Evaluation keeps the mean (y = x, the identity) and drops the noise.
"""
import numpy as np


def softmax(x, axis=-1):
    """y_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j: the shift cancels and nothing overflows."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_backward(y, dy, axis=-1):
    """dx = y * (dy - sum(dy * y)), from dy_i/dx_j = y_i (delta_ij - y_j)."""
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def cross_entropy_backward(logits, target, label_smoothing=0.0, ignore_index=None):
    """dz = (softmax(z) - q) / n on counted rows, 0 on ignored ones; q = (1 - eps) onehot + eps / V.

    The loss is the mean over the n rows whose target is not ignore_index of lse(z) - sum_j q_j z_j,
    and d lse / dz_j = p_j: prediction minus target.
    """
    V, eps = logits.shape[-1], label_smoothing
    p = softmax(logits)                                             # (..., V)
    valid = np.ones(target.shape, bool) if ignore_index is None else target != ignore_index
    q = np.full(logits.shape, eps / V)                             # every token gets eps / V ...
    t = np.where(valid, target, 0)                                 # (a safe id on ignored rows)
    np.put_along_axis(q, t[..., None], 1 - eps + eps / V, axis=-1)  # ... and the target 1 - eps more
    n = max(int(valid.sum()), 1)                                   # all ignored: gradient 0, not 0/0
    return (p - q) * valid[..., None] / n


def layer_norm_backward(x, gamma, dy, eps=1e-6):
    """dx = (g - mean(g) - xhat * mean(g * xhat)) / sigma with g = dy * gamma;
    dgamma = sum(dy * xhat), dbeta = sum(dy), both over every leading axis.

    mu and sigma depend on every x_j: the gradient loses its mean (a shift does nothing to xhat) and its
    component along xhat (neither does a scale), then is divided by sigma.
    """
    mu = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) / sigma
    g = dy * gamma                                                  # the gradient arriving at xhat
    dx = (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)) / sigma
    D = x.shape[-1]
    return dx, (dy * xhat).reshape(-1, D).sum(axis=0), dy.reshape(-1, D).sum(axis=0)


def answers_to_questions():
    """The lesson's questions, checked (the test suite runs this)."""
    rng = np.random.default_rng(0)
    y = softmax(rng.standard_normal((3, 7)))
    assert np.allclose(softmax_backward(y, rng.standard_normal((3, 7))).sum(-1), 0)
    q = np.array([0.925, 0.025, 0.025, 0.025])
    assert abs(-(q * np.log(q)).sum() - 0.3488) < 1e-4
    dx, _, _ = layer_norm_backward(rng.standard_normal((4, 1)), np.array([2.0]), np.ones((4, 1)))
    assert np.all(dx == 0)
    with np.errstate(divide="ignore"):                                                          # 4
        x = np.array([0.0, -200.0], np.float32)
        assert np.log(softmax(x))[1] == -np.inf and (x - np.log(np.exp(x - x.max()).sum()))[1] == -200
    z, t = rng.standard_normal((6, 7)), np.array([1, 2, 3, 0, 0, 0])                           # 0: padding
    assert np.allclose(cross_entropy_backward(z, t, 0.1).sum(-1), 0)                             # 5
    counted = cross_entropy_backward(z, t, ignore_index=0)                                       # 6
    assert np.allclose(counted[:3], cross_entropy_backward(z[:3], t[:3])) and not counted[3:].any()
    dW, ids = np.zeros((5, 3)), np.array([4, 1, 4])                                              # 7
    np.add.at(dW, ids, np.ones((3, 3)))
    wrong = np.zeros((5, 3))
    wrong[ids] = np.ones((3, 3))
    assert dW[4, 0] == 2 and wrong[4, 0] == 1
    masks = np.array([0.0, 2.0])                                                                  # 8
    assert masks.mean() == 1 and masks.var() == 1
