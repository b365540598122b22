"""Modules: registration, sharing, train/eval, state_dict round trips and errors; the layers' known
answers, initialisation and gradient checks (parameters included) on shapes drawn by hypothesis."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import minitransformer as mt
from minitransformer import backend, nn
from conftest import f32_tol, randn

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
leads = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.norm(x + self.drop(self.ff(x)))


class Net(nn.Module):
    """Embedding tied to the output projection (as in the paper), two blocks in a ModuleList."""

    def __init__(self, vocab=7, d=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Block(d) for _ in range(n_layers)])
        self.out = nn.Linear(d, vocab, bias=False)
        self.shared = self.embed  # the same module under a second name

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return x @ self.embed.weight.T  # tied pre-softmax projection


# -------------------------------------------------------------------- Parameter and Module
def test_parameter_is_float32_on_current_backend(xp_backend):
    p = nn.Parameter(np.arange(3.0))
    assert p.requires_grad and p.dtype == np.float32 and p.shape == (3,)
    assert isinstance(p.data, xp_backend.ndarray)
    assert nn.Parameter([1, 2], dtype=np.float64).dtype == np.float64
    assert isinstance(p, mt.Tensor)


def test_named_parameters_dotted_and_shared_once(xp_backend):
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["embed.weight",
                     "layers.0.ff.weight", "layers.0.ff.bias", "layers.0.norm.gamma", "layers.0.norm.beta",
                     "layers.1.ff.weight", "layers.1.ff.bias", "layers.1.norm.gamma", "layers.1.norm.beta",
                     "out.weight"]
    assert len(net.parameters()) == len(names)
    assert net.num_parameters() == 7 * 4 + 2 * (4 * 4 + 4 + 4 + 4) + 4 * 7
    # share a parameter under a second name: listed once, under its first name, counted once
    net.out.weight = net.layers[0].ff.weight
    assert "out.weight" not in dict(net.named_parameters())
    assert net.num_parameters() == 7 * 4 + 2 * (4 * 4 + 4 + 4 + 4)
    assert list(net.state_dict()) == names[:-1]


def test_modules_and_children(xp_backend):
    net = Net()
    kinds = [type(m).__name__ for m in net.modules()]
    assert kinds == ["Net", "Embedding", "ModuleList", "Block", "Linear", "LayerNorm", "Dropout",
                     "Block", "Linear", "LayerNorm", "Dropout", "Linear"]  # the shared embed once
    assert [type(m).__name__ for m in net.children()] == ["Embedding", "ModuleList", "Linear"]


def test_reassigning_an_attribute_unregisters_it(xp_backend):
    lin = nn.Linear(2, 3)
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    del lin.weight
    assert lin.parameters() == []


def test_forgetting_super_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match=r"super\(\)\.__init__\(\)"):
        Bad()


def test_train_eval_propagate_and_switch_dropout(xp_backend):
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(net(ids).numpy(), net(ids).numpy())  # no dropout: deterministic
    net.train()
    assert all(m.training for m in net.modules())
    net.layers[1].train(False)
    assert net.training and not net.layers[1].drop.training and net.layers[0].drop.training


def test_zero_grad_and_call_is_forward(xp_backend):
    net = Net().eval()
    out = net(np.array([[1, 2, 3]]))
    assert out.shape == (1, 3, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters() if p is not net.out.weight)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


# -------------------------------------------------------------------- state_dict
def test_state_dict_round_trip(xp_backend):
    mt.seed(1)
    a = Net()
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    mt.seed(2)
    b = Net()
    assert not np.array_equal(b.state_dict()["embed.weight"], state["embed.weight"])
    b.load_state_dict(state)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy(), err_msg=name)
        assert pb.dtype == np.float32 and isinstance(pb.data, xp_backend.ndarray)
    ids = np.array([[1, 2], [3, 4]])
    np.testing.assert_array_equal(a.eval()(ids).numpy(), b.eval()(ids).numpy())
    # copies both ways: the module and the dictionary never share memory
    state["embed.weight"][:] = 0
    assert not np.all(b.embed.weight.numpy() == 0)
    before = a.state_dict()
    a.embed.weight.data[:] = 5
    assert not np.all(before["embed.weight"] == 5)


def test_load_state_dict_casts_dtype_and_accepts_tensors(xp_backend):
    lin = nn.Linear(2, 3)
    lin.load_state_dict({"weight": np.ones((2, 3), np.float64), "bias": mt.tensor([1.0, 2.0, 3.0])})
    assert lin.weight.dtype == np.float32 and lin.bias.dtype == np.float32
    np.testing.assert_array_equal(lin.bias.numpy(), [1, 2, 3])


def test_load_state_dict_names_every_problem(xp_backend):
    net = Net()
    good = net.state_dict()
    bad = dict(good)
    bad["layers.0.ff.weight"] = np.zeros((5, 4))       # mis-shaped
    del bad["layers.1.norm.beta"], bad["out.weight"]   # missing
    bad["layers.2.ff.weight"] = np.zeros((4, 4))       # unexpected
    with pytest.raises(ValueError) as err:
        net.load_state_dict(bad)
    msg = str(err.value)
    for part in ("layers.0.ff.weight", "(4, 4)", "(5, 4)", "layers.1.norm.beta", "out.weight",
                 "layers.2.ff.weight", "missing", "unexpected", "mis-shaped"):
        assert part in msg, part
    # nothing was loaded, and strict=False still refuses a mis-shaped entry
    np.testing.assert_array_equal(net.layers[0].ff.weight.numpy(), good["layers.0.ff.weight"])
    with pytest.raises(ValueError, match="mis-shaped"):
        net.load_state_dict(bad, strict=False)
    del bad["layers.0.ff.weight"]
    net.load_state_dict(bad, strict=False)  # missing and unexpected are tolerated


# -------------------------------------------------------------------- layers
def test_linear_known_answer_and_init(xp_backend):
    mt.seed(0)
    lin = nn.Linear(300, 200)
    w = lin.weight.numpy()
    a = np.sqrt(6 / 500)
    assert w.shape == (300, 200) and np.abs(w).max() <= a
    assert abs(w.var() - a * a / 3) < 0.05 * a * a / 3  # Var U(-a, a) = a^2 / 3 = 2 / (d_in + d_out)
    assert np.all(lin.bias.numpy() == 0)
    x = np.random.default_rng(0).standard_normal((2, 3, 300)).astype(np.float32)
    lin.bias.data[:] = backend.asarray(np.arange(200.0, dtype=np.float32))
    # two float32 matmuls of inner size 300 (other BLAS calls): 300 eps |x| |w| (Cauchy-Schwarz);
    # the bias (up to 199) added in float32: eps relative
    dot = np.linalg.norm(x, axis=-1).max() * np.linalg.norm(w, axis=0).max()
    np.testing.assert_allclose(lin(mt.tensor(x)).numpy(), x @ w + np.arange(200.0), rtol=f32_tol(1),
                               atol=f32_tol(300, dot))


def test_same_seed_same_initial_weights(xp_backend):
    mt.seed(5)
    a = Net().state_dict()
    mt.seed(5)
    b = Net().state_dict()
    mt.seed(6)
    c = Net().state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["embed.weight"], c["embed.weight"])


@SETTINGS
@given(lead=leads, d_in=st.integers(1, 4), d_out=st.integers(1, 4), bias=st.booleans(), seed=st.integers(0, 9))
def test_linear_gradcheck(xp_backend, lead, d_in, d_out, bias, seed):
    lin = nn.Linear(d_in, d_out, bias=bias)
    if bias:
        lin.bias.data = backend.asarray(np.random.default_rng(seed).standard_normal(d_out).astype(np.float32))
    x = randn(*lead, d_in, seed=seed)
    y = lin(x)
    assert y.shape == lead + (d_out,)
    assert mt.gradcheck(lambda t, *ps: lin(t), x, *lin.parameters())


def test_embedding_init_and_forward(xp_backend):
    mt.seed(0)
    emb = nn.Embedding(1000, 64)
    w = emb.weight.numpy()
    assert abs(w.std() - 64 ** -0.5) < 0.02 * 64 ** -0.5 and abs(w.mean()) < 0.01
    ids = np.array([[3, 3, 999], [0, 1, 2]])
    np.testing.assert_array_equal(emb(ids).numpy(), w[ids])


@SETTINGS
@given(lead=leads, V=st.integers(1, 4), d=st.integers(1, 4), seed=st.integers(0, 9))
def test_embedding_gradcheck_repeated_ids(xp_backend, lead, V, d, seed):
    emb = nn.Embedding(V, d)
    ids = np.random.default_rng(seed).integers(0, V, lead + (5,))  # 5 draws from <= 4 ids: repeats
    assert mt.gradcheck(lambda w: emb(ids), emb.weight)


@SETTINGS
@given(lead=leads, d=st.integers(2, 5), seed=st.integers(0, 9))
def test_layer_norm_module_gradcheck(xp_backend, lead, d, seed):
    ln = nn.LayerNorm(d)
    x0 = randn(*lead, d, seed=seed, requires_grad=False)
    y = ln(x0).numpy()
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-6)       # gamma 1, beta 0: standardised rows
    var = x0.numpy().var(-1)                                   # var / (var + eps): below 1 for near-constant rows
    np.testing.assert_allclose(y.var(-1), var / (var + 1e-6), rtol=1e-6, atol=1e-9)
    ln.gamma.data = backend.asarray(np.random.default_rng(seed).standard_normal(d).astype(np.float32))
    ln.beta.data = backend.asarray(np.random.default_rng(seed + 1).standard_normal(d).astype(np.float32))
    x = randn(*lead, d, seed=seed)
    assert mt.gradcheck(lambda t, g, b: ln(t), x, ln.gamma, ln.beta)


@SETTINGS
@given(lead=leads, d=st.integers(1, 4))
def test_dropout_module(xp_backend, lead, d):
    x = randn(*lead, d)
    assert nn.Dropout(0.0)(x) is x
    assert mt.gradcheck(nn.Dropout(0.0), x)
    drop = nn.Dropout(0.5)
    assert drop.eval()(x) is x
    drop.train()

    def fixed_mask(t):
        mt.seed(11)  # the same mask forward, backward and in every numeric difference
        return drop(t)
    y = fixed_mask(x).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 2 * x.numpy()[kept])
    assert mt.gradcheck(fixed_mask, x)


def test_module_list(xp_backend):
    blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 3)])
    assert len(blocks) == 2 and blocks[-1] is blocks[1] and blocks[1].d_out == 3
    blocks.append(nn.LayerNorm(3))
    assert len(blocks) == 3 and [type(m).__name__ for m in blocks] == ["Linear", "Linear", "LayerNorm"]
    assert [n for n, _ in blocks.named_parameters()][-2:] == ["2.gamma", "2.beta"]
    assert len(blocks[1:]) == 2 and blocks[1:][0] is blocks[1]
    with pytest.raises(IndexError):
        blocks[3]
    with pytest.raises(TypeError, match="Modules"):
        blocks.append(lambda x: x)


def test_inference_mode_turns_dropout_and_grad_off_and_restores_each_flag():
    model = nn.ModuleList([nn.Dropout(0.5), nn.Dropout(0.5)])
    model[1].eval()                                   # a sub-module with a flag of its own
    x = mt.tensor(np.ones((4, 4)), requires_grad=True)
    with model.inference_mode():
        assert not any(m.training for m in model.modules())
        y = model[0](x) * 2.0
        assert not y.requires_grad and np.array_equal(y.numpy(), 2 * x.numpy())  # no graph, no dropout
    assert [m.training for m in model.modules()] == [True, True, False]


def test_layers_refuse_senseless_sizes_and_rates_when_made():
    for make, name in ((lambda: nn.Linear(8 / 2, 3), "Linear: d_in"),      # d_model / 2 is a float
                       (lambda: nn.Linear(4, 0), "Linear: d_out"),
                       (lambda: nn.Embedding(-1, 4), "Embedding: num_embeddings"),
                       (lambda: nn.LayerNorm(4.0), "LayerNorm: d")):
        with pytest.raises(ValueError, match=f"{name} must be an integer of at least 1"):
            make()
    with pytest.raises(ValueError, match=r"LayerNorm: eps must be a finite number in \(0\.0, inf\)"):
        nn.LayerNorm(4, eps=-1e-6)
    for p in (1.5, "0.1", float("nan")):
        with pytest.raises(ValueError, match=r"Dropout: p must be a finite number in \[0\.0, 1\.0\)"):
            nn.Dropout(p)
