"""The engine of tensor.py: its bookkeeping (reuse, diamonds, accumulation, deep chains, no_grad),
custom backwards and the errors that name them, freed graphs, and inputs changed after the forward
pass. The elementary ops themselves: test_ops.py."""
import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.tensor import unbroadcast


def t64(a, requires_grad=True):
    return mt.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def test_reused_input_and_diamond_graph_accumulate():
    x = t64([1.5, -2.0])
    y = x * x + x                     # x used three times
    (y * 3).sum().backward()
    np.testing.assert_allclose(backend.to_numpy(x.grad), 3 * (2 * x.numpy() + 1))
    a = t64([0.7])
    b, c = a.exp(), a * 2             # a diamond: a -> b, c -> d
    d = b * c
    assert mt.gradcheck(lambda a: a.exp() * (a * 2), a)
    d.backward()
    np.testing.assert_allclose(backend.to_numpy(a.grad), np.exp(0.7) * 1.4 + np.exp(0.7) * 2)


def test_grad_accumulates_across_backward_calls():
    x = t64([1.0, 2.0])
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(backend.to_numpy(x.grad), [5.0, 5.0])


def test_each_leaf_keeps_its_own_copy_of_its_gradient_in_its_dtype():
    """add's backward hands one array to both parents (a read-only broadcast view, after sum): each leaf
    keeps a copy of its own, so a later backward adds into one leaf's .grad and leaves the other's alone.
    A gradient of another dtype (a custom float64 backward) becomes the leaf's dtype."""
    from minitransformer.tensor import make_node
    a, b = mt.tensor([1.0, 2.0], requires_grad=True), mt.tensor([3.0, 4.0], requires_grad=True)
    (a + b).sum().backward()
    (a * 2).sum().backward()
    assert backend.to_numpy(a.grad).tolist() == [3.0, 3.0] and backend.to_numpy(b.grad).tolist() == [1.0, 1.0]
    x = mt.tensor([1.0, 1.0], requires_grad=True)
    make_node(x.data * 2, (x,), lambda g: (backend.xp.full(2, 2.0),), "double").sum().backward()
    assert x.grad.dtype == np.float32 and backend.to_numpy(x.grad).tolist() == [2.0, 2.0]


def test_deep_chain_has_no_recursion_limit():
    x = mt.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y + 1e-4
    y.sum().backward()
    assert x.grad[0] == 1.0


def test_no_grad_builds_no_graph():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.no_grad():
        y = (x * 2).exp().sum()
    assert not y.requires_grad and y._parents == () and y._backward is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()
    z = (x * 2).sum()                 # grad mode is back on after the block
    assert z.requires_grad


def test_detach_item_numpy_repr():
    x = mt.tensor([[1.0, 2.0]], requires_grad=True)
    y = (x * 2).sum()
    assert y.item() == 6.0 and isinstance(y.item(), float)
    assert not y.detach().requires_grad
    assert isinstance(x.numpy(), np.ndarray)
    r = repr(y)
    assert "shape=()" in r and "float32" in r and f"device={backend.device}" in r
    assert "op=sum" in r
    with pytest.raises(ValueError, match="one element"):
        x.item()


def test_unbroadcast_is_the_adjoint_of_broadcasting():
    g = np.ones((2, 3, 4))
    assert unbroadcast(g, (3, 1)).tolist() == [[8.0]] * 3
    assert unbroadcast(g, ()).item() == 24.0
    assert unbroadcast(g, (2, 3, 4)) is g


@pytest.mark.parametrize("returned, got", [
    (lambda g: g * 2, "returned ndarray"),                          # the array itself, not a tuple of one
    (lambda g: None, "returned NoneType"),                          # a backward without return
    (lambda g: (g, g), "returned a tuple of 2: ndarray, ndarray"),  # one gradient too many
    (lambda g: ([1.0, 2.0, 3.0],), "returned a tuple of 1: list"),  # not an array
])
def test_a_custom_backward_that_returns_the_wrong_thing_is_named(returned, got):
    """make_node is how a user builds an op (lesson 02): its backward must return one array (or None)
    per parent; anything else is a TypeError naming the op, not a failure deep in the engine."""
    from minitransformer.tensor import make_node
    x = mt.tensor(np.ones(3, np.float32), requires_grad=True)
    y = make_node(x.data * 2, (x,), returned, "double")
    with pytest.raises(TypeError, match=rf"the backward of 'double' {got}; it must return a tuple of 1 array "):
        y.sum().backward()


def test_a_second_backward_through_a_freed_graph_is_refused():
    """backward() frees the graph as it walks it; walking it again would treat freed nodes as leaves
    and leave x.grad silently wrong (2 instead of 6 below), so it is an error naming the node."""
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="an earlier backward\\(\\) freed"):
        y.backward()
    h = x * x
    h.sum().backward()
    with pytest.raises(RuntimeError, match="'mul' node whose graph an earlier backward"):
        (h * 2).sum().backward()
    x.grad = None
    ((x * x).sum() + (x * x * 2).sum()).backward()      # the way: add the losses, one backward
    np.testing.assert_array_equal(backend.to_numpy(x.grad), [6.0, 12.0])


def test_backward_refuses_a_gradient_of_another_shape():
    x = mt.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(ValueError, match=r"grad has shape \(3, 2\), but the tensor has shape \(2, 3\)"):
        (x * 2).backward(np.ones((3, 2), np.float32))     # same size: it used to be reshaped silently
    (x * 2).backward([[1.0] * 3] * 2)                      # a list of the right shape is fine
    np.testing.assert_array_equal(backend.to_numpy(x.grad), np.full((2, 3), 2.0))


def test_a_custom_backward_with_a_gradient_of_the_wrong_shape_is_named():
    from minitransformer.tensor import make_node
    x = mt.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    for wrong in ((3, 2), (4,)):
        y = make_node(x.data * 2, (x,), lambda g, s=wrong: (np.ones(s, np.float32),), "double")
        with pytest.raises(TypeError, match=rf"'double' returned a tuple of 1: ndarray of shape \({wrong[0]},"):
            y.sum().backward()


def test_integer_tensors_cannot_require_gradients_and_text_is_no_tensor():
    with pytest.raises(TypeError, match="only floating-point tensors can require gradients, got dtype int"):
        mt.tensor([1, 2, 3], requires_grad=True)          # its gradient would be cast to int: all zeros
    with pytest.raises(TypeError, match="real numbers or booleans"):
        mt.tensor("abc")
    assert mt.tensor([1, 2, 3]).dtype.kind == "i" and mt.tensor([1.0, 2.0], requires_grad=True).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_a_tensor_without_floats_cannot_require_gradients_however_it_is_made(dtype):
    """Its gradient would be cast to its dtype (an integer: truncated, often all zeros), so it is refused
    where it is made: Tensor(...) itself, mt.tensor, requires_grad set afterwards (backward refuses before
    any gradient is written), or a new .data."""
    with pytest.raises(TypeError, match=rf"Tensor: only floating-point tensors can require gradients, got dtype {np.dtype(dtype)}"):
        mt.Tensor(np.ones(3, dtype), requires_grad=True)
    with pytest.raises(TypeError, match=f"got dtype {np.dtype(dtype)}"):
        mt.tensor(np.ones(3, dtype), requires_grad=True)
    w = t64([1.0, 2.0, 3.0])
    ids = mt.Tensor(np.ones(3, dtype))                # without a gradient: token ids, masks
    ids.requires_grad = True
    y = (w * ids).sum()
    with pytest.raises(TypeError, match=f"backward\\(\\) reached a leaf of dtype {np.dtype(dtype)} with requires_grad=True"):
        y.backward()
    assert w.grad is None                             # refused before any work
    with pytest.raises(TypeError, match="only floating-point tensors can require gradients"):
        w.data = np.ones(3, dtype)
    assert w.data.dtype == np.float64


@pytest.mark.parametrize("make", [
    lambda: mt.Tensor(np.array([1 + 2j])), lambda: mt.Tensor(np.array([1 + 2j]), requires_grad=True),
    lambda: mt.Tensor(np.array(["a"])), lambda: mt.Tensor(np.array([object()])),
    lambda: mt.tensor([1.0]) * mt.Tensor(np.array([1j])), lambda: mt.tensor([1.0]) * np.array([1j]),
    lambda: mt.ops.as_tensor(np.array([1j])),
])
def test_complex_text_and_object_tensors_are_refused_where_they_are_made(make):
    with pytest.raises(TypeError, match="holds real numbers or booleans|cannot combine .* only real numbers"):
        make()


def test_data_that_is_no_array_is_refused_and_integer_tensors_without_gradients_still_work():
    with pytest.raises(TypeError, match=r"Tensor: data must be a NumPy or CuPy array, got list \(mt.tensor"):
        mt.Tensor([1.0, 2.0])
    w = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="data must be a NumPy or CuPy array, got float"):
        w.data = 3.0
    ids = mt.Tensor(np.array([[2, 0], [1, 1]]))       # token ids: no gradient, used everywhere
    table = mt.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    mt.functional.embedding(table, ids).sum().backward()
    np.testing.assert_array_equal(backend.to_numpy(table.grad), [[1, 1], [2, 2], [1, 1]])
    assert (ids * 2).dtype.kind == "i" and not (ids * 2).requires_grad


# ---------------------------------------------------------------- saved inputs changed before backward
def _assign(w):
    w.data = w.data * 0


def _add_in_place(w):
    w.data += 1.0


def _adam_step(w):
    w.grad = np.ones_like(w.data)
    mt.optim.Adam([w], lr=0.1).step()


@pytest.mark.parametrize("write", [_assign, _add_in_place, _adam_step])
def test_backward_names_the_op_whose_saved_input_changed(write):
    w, x = t64([1.0, 2.0]), t64([3.0, 4.0], requires_grad=False)
    y = (w * x).relu().sum()
    if write is _add_in_place and backend.device == "cpu":  # NumPy: the array is read-only while the
        # graph holds it, so += fails at once (CuPy arrays have no write flag: there, the setter counts it)
        with pytest.raises(ValueError, match="read-only"):
            write(w)
        w.data = w.data + 1.0     # the same change by assignment is caught by backward
    else:
        write(w)
    with pytest.raises(RuntimeError, match="'mul' node whose input 0 .* was changed after the forward pass"):
        y.backward()


def test_raw_writes_into_saved_arrays_fail_at_once_and_are_allowed_again_after_backward():
    """NumPy alone: CuPy arrays have no write flag, so on the GPU only the version counter guards."""
    mt.use("cpu")
    w, x = t64([1.0, 2.0]), t64([3.0, 4.0], requires_grad=False)
    y = (w * x).sum()
    for t in (w, x):
        with pytest.raises(ValueError, match="read-only"):
            t.data[...] = 0.0
    y.backward()
    np.testing.assert_array_equal(w.grad, [3.0, 4.0])
    w.data[...] = 0.0                 # the graph is gone: writing is fine again
    x.data += 1.0
    (w * x).sum()                     # a graph dropped without backward also gives its arrays back
    w.data[...] = 5.0
    np.testing.assert_array_equal(w.data, [5.0, 5.0])


def test_arrays_read_only_before_the_graph_stay_read_only():
    mt.use("cpu")                     # NumPy's write flag (CuPy arrays have none)
    w = mt.tensor(np.broadcast_to(np.float64(2.0), (3,)), requires_grad=True)  # a read-only view
    (w * w).sum().backward()
    assert not w.data.flags.writeable
    np.testing.assert_array_equal(w.grad, [4.0, 4.0, 4.0])


def test_a_view_taken_after_the_forward_pass_is_read_only_and_one_taken_before_is_declared_with_changed():
    """NumPy cannot lock a view that exists before the forward pass (the one write the engine does not see,
    docs/reliability.md): a view taken after it is read-only, and w.changed() after a write through an
    older one makes backward refuse."""
    mt.use("cpu")
    w = t64([1.0, 2.0])
    before = w.data[:]                # a view that exists before the graph
    y = (w * w).sum()
    after = w.data[:]
    with pytest.raises(ValueError, match="read-only"):
        after[0] = 5.0
    before[0] = 5.0                   # not seen by the engine ...
    w.changed()                       # ... until said so
    with pytest.raises(RuntimeError, match="'mul' node whose input 0 .* was changed after the forward pass"):
        y.backward()


def test_unchanged_inputs_pass_and_gradcheck_leaves_no_trace():
    a = t64([0.7])
    d = a.exp() * (a * 2)
    assert mt.gradcheck(lambda a: a.exp() * (a * 2), a)  # swaps a.data and puts it back: not a change
    d.backward()
    np.testing.assert_allclose(backend.to_numpy(a.grad), np.exp(0.7) * 1.4 + np.exp(0.7) * 2)


def test_load_state_dict_while_a_graph_holds_the_weights_writes_them_and_backward_refuses():
    """assign() (what load_state_dict does) writes into a read-only saved array and counts as a change."""
    layer = mt.nn.Linear(3, 2)
    y = layer(mt.tensor(np.ones((4, 3), np.float32))).sum()
    state = {k: v + 1.0 for k, v in layer.state_dict().items()}
    layer.load_state_dict(state)
    np.testing.assert_array_equal(layer.weight.numpy(), state["weight"])
    with pytest.raises(RuntimeError, match="'linear' node whose input 1 .* was changed after the forward pass"):
        y.backward()
