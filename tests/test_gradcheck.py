"""gradcheck itself: it passes correct gradients, and it catches a wrong backward in both modes,
naming the input and the element."""
import numpy as np
import pytest

import minitransformer as mt
from minitransformer.tensor import make_node

from conftest import randn


def wrong_square(x):
    """x**2 with a deliberately wrong backward: 3x instead of 2x."""
    return make_node(x.data ** 2, (x,), lambda g: (g * 3 * x.data,), "wrong_square")


def wrong_at_one_element(x):
    """x**2 whose gradient is off by 0.5 at flat element 1 only."""
    def backward(g):
        dx = g * 2 * x.data
        dx.reshape(-1)[1] += 0.5                       # one element off
        return (dx,)
    return make_node(x.data ** 2, (x,), backward, "wrong_at_one")


def test_correct_gradients_pass_in_both_modes():
    x, w = randn(3, 4), randn(4, 5, seed=1)
    assert mt.gradcheck(lambda x, w: (x @ w).exp().sum(axis=0), x, w, mode="elementwise")
    assert mt.gradcheck(lambda x, w: (x @ w).exp().sum(axis=0), x, w, mode="directional")


def test_wrong_backward_is_caught_elementwise_with_input_and_index():
    a, x = randn(2), randn(2, 3, seed=1)
    with pytest.raises(mt.GradcheckError, match=r"input 1 is wrong at index \(0, 1\)") as e:
        mt.gradcheck(lambda a, x: wrong_at_one_element(x) * a.sum(), a, x, mode="elementwise")
    assert "analytic" in str(e.value) and "numeric" in str(e.value) and "relative error" in str(e.value)


def test_wrong_backward_is_caught_directionally_and_names_the_input():
    x, y = randn(20, 30), randn(20, 30, seed=1)
    with pytest.raises(mt.GradcheckError, match=r"input 1 \(shape \(20, 30\)\)"):
        mt.gradcheck(lambda x, y: x * 2 + wrong_square(y), x, y, mode="directional")


def test_inputs_are_restored_to_their_dtype_and_values():
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32), requires_grad=True)
    before = x.numpy().copy()
    mt.gradcheck(lambda x: (x * x).sum(), x, atol=1e-4)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x.numpy(), before)


def test_nothing_to_check_is_an_error():
    with pytest.raises(ValueError, match="requires_grad"):
        mt.gradcheck(lambda x: x * 2, mt.tensor([1.0]))


def test_runs_on_each_backend(xp_backend):
    x = randn(3, 3)
    assert mt.gradcheck(lambda x: (x.T @ x).exp(), x)
    with pytest.raises(mt.GradcheckError):
        mt.gradcheck(wrong_square, x)


def test_integer_inputs_and_unknown_modes_are_refused_before_any_work():
    x = mt.Tensor(np.ones(3, np.int64))
    x.requires_grad = True                           # set after its making, past Tensor's own check
    with pytest.raises(TypeError, match="input 0 holds int64; only floating-point inputs"):
        mt.gradcheck(lambda t: (t * t).sum(), x)
    calls = []
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        mt.gradcheck(lambda t: calls.append(1) or (t * t).sum(), randn(3, requires_grad=True), mode="fast")
    assert not calls


@pytest.mark.parametrize("argument, value, message", [
    ("eps", 0, r"eps must be a finite number in \(0.0, inf\), got 0"),     # would divide by zero
    ("eps", -1e-6, "eps must be a finite number"), ("eps", float("nan"), "eps must be a finite number"),
    ("eps", float("inf"), "eps must be a finite number"), ("eps", True, "eps must be a finite number"),
    ("eps", "1e-6", "eps must be a finite number"),
    ("atol", -1e-5, r"atol must be a finite number in \[0.0, inf\), got -1e-05"),
    ("atol", float("nan"), "atol must be a finite number"), ("rtol", -0.1, "rtol must be a finite number"),
    ("rtol", float("inf"), "rtol must be a finite number"), ("rtol", None, "rtol must be a finite number"),
    ("n_directions", 0, "n_directions must be an integer of at least 1"),
    ("n_directions", 2.0, "n_directions must be an integer"), ("seed", -1, "seed must be an integer of at least 0"),
    ("max_elements", 1.5, "max_elements must be an integer"), ("mode", ["auto"], r"unknown mode \['auto'\]"),
])
def test_arguments_the_check_cannot_run_with_are_refused_in_one_sentence_before_any_work(argument, value, message):
    calls = []
    x = randn(3, requires_grad=True)
    with pytest.raises(ValueError, match="gradcheck: " + message):
        mt.gradcheck(lambda t: calls.append(1) or (t * t).sum(), x, **{argument: value})
    assert not calls
    assert mt.gradcheck(lambda t: (t * t).sum(), x, eps=np.float64(1e-6), atol=0, rtol=np.float32(1e-3),
                        seed=np.int64(3), mode="directional")       # NumPy scalars are numbers too


def test_a_function_that_is_no_function_is_refused():
    with pytest.raises(TypeError, match="gradcheck: the first argument must be a function, got Tensor"):
        mt.gradcheck(randn(3, requires_grad=True), randn(3, requires_grad=True))
