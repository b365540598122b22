"""mt.profile(): per-op forward and backward times, outermost op only, a sorted table."""
import numpy as np
import pytest

import minitransformer as mt
from minitransformer.tensor import make_node, traced


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


def test_fused_op_counts_once_under_its_own_name():
    @traced
    def fused_square_sum(a):
        inner = (a * a).sum()               # elementary ops inside a traced op are not recorded
        return make_node(inner.data, (a,), lambda g: (2 * a.data * g,), "fused_square_sum")

    a = mt.tensor([1.0, 2.0], requires_grad=True)
    with mt.profile() as prof:
        fused_square_sum(a).backward()
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
