"""mt.profile(): per-op forward and backward times, outermost op only, a sorted table; the ops are
swapped for timing wrappers while it is active and restored exactly after."""
import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import ops
from minitransformer.profiler import traced
from minitransformer.tensor import make_node
from minitransformer.transformer import Transformer, TransformerConfig


def package_names():
    """{(module, name): the object bound to it} over every loaded minitransformer module."""
    return {(m, name): value for m, module in list(sys.modules.items())
            if module is not None and (m == "minitransformer" or m.startswith("minitransformer."))
            for name, value in vars(module).items()}


def assert_bound_as(before):
    """Every name of `before` (package_names()) is bound to the very same object again, and no other name."""
    after = package_names()
    assert after.keys() == before.keys() and all(after[key] is before[key] for key in before)


def test_records_forward_and_backward_per_op(xp_backend):
    x = mt.tensor(np.random.default_rng(0).standard_normal((64, 64)), requires_grad=True)
    with mt.profile() as prof:
        loss = (x @ x).relu().mean()
        loss.backward()
    totals = prof.totals()
    assert set(totals) == {"matmul", "relu", "mean"}
    assert all(f > 0 and b > 0 for f, b in totals.values())
    assert prof.stats["matmul"][0] == 1 and prof.stats["matmul"][2] == 1      # one forward, one backward call
    lines = prof.table().splitlines()
    assert lines[0].split()[0] == "op" and "(all ops)" in lines[-1]
    ranked = [line.split()[0] for line in lines[1:-1]]
    by_total = sorted(totals, key=lambda k: -sum(totals[k]))
    assert ranked == by_total


def test_fused_op_counts_once_under_its_own_name(monkeypatch):
    def fused_square_sum(a):
        inner = (a * a).sum()               # elementary ops inside a traced op are not recorded
        return make_node(inner.data, (a,), lambda g: (2 * a.data * g,), "fused_square_sum")

    assert traced(fused_square_sum) is fused_square_sum                  # registered, not wrapped
    monkeypatch.setattr(mt.functional, "fused_square_sum", fused_square_sum, raising=False)  # where ops live
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.profile() as prof:
        mt.functional.fused_square_sum(a).backward()
    assert set(prof.totals()) == {"fused_square_sum"}
    assert a.grad.tolist() == [2.0, 4.0]


def test_profiles_do_not_nest_and_stop_on_exit():
    with mt.profile():
        with pytest.raises(RuntimeError, match="already active"):
            with mt.profile():
                pass
    with mt.profile() as prof:
        pass
    (mt.tensor([1.0], requires_grad=True) * 2).sum().backward()   # after exit: nothing recorded
    assert prof.totals() == {}


def test_a_refused_nested_profile_leaves_the_outer_one_recording():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.profile() as outer:
        with pytest.raises(RuntimeError, match="already active"):
            with mt.profile():
                pass
        x.relu()                                                       # after the refusal: still recorded
    assert set(outer.totals()) == {"relu"}


def test_ops_are_plain_functions_outside_a_profile_and_restored_exactly_after_one():
    before = package_names()
    assert not hasattr(ops.add, "__wrapped__")                               # no wrapper outside a profile
    with mt.profile():
        during = package_names()
    assert_bound_as(before)                                                  # every name bound back
    changed = {key for key in before if during[key] is not before[key]} - {("minitransformer.profiler", "_active")}
    assert {("minitransformer.ops", "add"), ("minitransformer.tensor", "where"), ("minitransformer", "concat"),
            ("minitransformer.functional", "softmax"), ("minitransformer", "scaled_dot_product_attention")} <= changed
    assert all(during[key].__wrapped__ is before[key] for key in changed)    # each one a wrapper of its op


def test_an_exception_inside_a_profile_restores_everything():
    before = package_names()
    with pytest.raises(ZeroDivisionError):
        with mt.profile() as prof:
            mt.tensor([1.0]).exp()
            1 / 0
    assert_bound_as(before)
    assert set(prof.totals()) == {"exp"}
    with mt.profile() as again:                                              # not left active
        mt.tensor([1.0]).log()
    assert set(again.totals()) == {"log"}


def test_ops_reached_through_imported_names_are_timed():
    x = mt.tensor(np.ones((1, 2, 3, 4), np.float32), requires_grad=True)
    with mt.profile() as prof:
        y = mt.concat([x, x], axis=3)                                        # mt.concat: from .tensor import
        z = y.masked_fill(y.data < 0, 0.0)                                    # where's node, timed once
        out = mt.scaled_dot_product_attention(z, z, z)                       # from .attention import
        mt.functional.softmax(out, axis=-1).sum().backward()                 # F.softmax: the module's name
    stats = prof.stats
    for name in ("concat", "where", "attention", "softmax", "sum"):
        assert stats[name][0] == 1 and stats[name][2] == 1, name


def test_backward_rows_match_forward_rows_in_a_training_step():
    mt.seed(0)
    model = Transformer(TransformerConfig.tiny(vocab_size=20, d_model=16, d_ff=32, n_heads=2, n_layers=1,
                                               dropout=0.1, attention_dropout=0.1, relu_dropout=0.1))
    ids = np.random.default_rng(0).integers(3, 20, (3, 7))
    with mt.profile() as prof:
        model.loss(ids[:, :5], ids[:, :-1], ids[:, 1:]).backward()
    forward = {name: r[0] for name, r in prof.stats.items()}
    backward = {name: r[2] for name, r in prof.stats.items()}
    assert forward == backward and {"linear", "multi_head_attention", "layer_norm", "cross_entropy"} <= set(forward)


def test_a_backward_after_the_profile_is_not_recorded():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.profile() as prof:
        y = (x * x).sum()
    y.backward()
    assert prof.stats["mul"][:3:2] == [1, 0] and prof.stats["sum"][:3:2] == [1, 0]
    assert x.grad.tolist() == [2.0, 4.0]
