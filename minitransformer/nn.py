"""Layers: Module (parameters, train/eval, state_dict), Parameter, Linear, Embedding, LayerNorm,
Dropout, ModuleList.

A Module finds its parameters and sub-modules from attribute assignment, as in PyTorch, so a model
is plain Python. Left out on purpose: buffers, hooks, device moves (build the model after
mt.use(...); load_state_dict puts weights on the current backend) and dtype conversion.
"""
import contextlib
import math

import numpy as np

from . import backend
from . import functional as F
from .checks import check_int, check_real
from .tensor import Tensor, data_of, no_grad


class Parameter(Tensor):
    """A Tensor a Module trains: requires_grad=True, float32 by default, on the current backend."""

    __slots__ = ()

    def __init__(self, data, dtype=None):
        data = data.data if isinstance(data, Tensor) else data
        dtype = backend.DEFAULT_DTYPE if dtype is None else dtype
        super().__init__(backend.asarray(data, dtype=dtype), requires_grad=True)

    def __repr__(self):
        return f"Parameter(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class Module:
    """Base class of layers. Subclasses call super().__init__() first, then assign Parameters and
    Modules as attributes (they are registered in assignment order) and define forward()."""

    def __init__(self):
        d = self.__dict__  # plain dict writes: __setattr__ needs these to exist
        d["_parameters"] = {}
        d["_modules"] = {}
        d["training"] = True

    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() at the top of "
                                 f"__init__, before assigning {name!r}")
        d["_parameters"].pop(name, None)
        d["_modules"].pop(name, None)
        if isinstance(value, Parameter):
            d["_parameters"][name] = value
        elif isinstance(value, Module):
            d["_modules"][name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ---------------------------------------------------------------- walking the tree
    def named_modules(self, prefix=""):
        """(dotted name, module) for this module and every descendant, each module once."""
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            children = [(f"{name}.{k}" if name else k, c) for k, c in m._modules.items()]
            stack.extend(reversed(children))

    def modules(self):
        """This module and every descendant, each once."""
        return (m for _, m in self.named_modules())

    def children(self):
        """The direct sub-modules, each once."""
        seen = set()
        for m in self._modules.values():
            if id(m) not in seen:
                seen.add(id(m))
                yield m

    def named_parameters(self):
        """(dotted name, parameter), e.g. ("encoder.layers.0.self_attn.w_qkv.weight", p); a
        parameter shared under several names is listed once, under the first name met."""
        seen = set()
        for prefix, m in self.named_modules():
            for k, p in m._parameters.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{prefix}.{k}" if prefix else k), p

    def parameters(self):
        """Every parameter once (shared ones too), in a fixed order."""
        return [p for _, p in self.named_parameters()]

    def num_parameters(self):
        """The number of trained scalars, shared parameters counted once."""
        return sum(p.size for p in self.parameters())

    # ---------------------------------------------------------------- training state
    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def train(self, mode=True):
        """Set training mode (dropout on) in this module and all below it; returns self."""
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self):
        """Evaluation mode: dropout off. Same as train(False)."""
        return self.train(False)

    @contextlib.contextmanager
    def inference_mode(self):
        """eval() under no_grad for the block; every module's own train/eval flag is restored after.

            with model.inference_mode():
                logits = model(src, tgt_in)      # no dropout, no graph
        """
        modes = [(m, m.training) for m in self.modules()]
        self.eval()
        try:
            with no_grad():
                yield self
        finally:
            for m, mode in modes:
                m.training = mode

    # ---------------------------------------------------------------- saving and loading
    def state_dict(self):
        """{dotted name: NumPy array}, host copies of every parameter (shared ones once)."""
        return {name: backend.host_copy(p.data) for name, p in self.named_parameters()}

    def load_state_dict(self, state, strict=True):
        """Copy values from `state` into the parameters, on the current backend, in each
        parameter's dtype.

        Fails, before changing anything, with one error naming every missing, unexpected (strict
        only), mis-shaped and wrongly typed (integer, boolean or complex for a floating
        parameter) entry.
        """
        params = dict(self.named_parameters())
        missing = [k for k in params if k not in state]
        unexpected = [k for k in state if k not in params]
        shape = lambda v: tuple(np.shape(data_of(v)))
        misshaped = [f"{k}: expected {tuple(p.shape)}, got {shape(state[k])}"
                     for k, p in params.items() if k in state and shape(state[k]) != p.shape]
        # of arrays, CuPy arrays and lists alike
        dtype = lambda v: getattr(data_of(v), "dtype", None) or np.asarray(v).dtype
        wrong_kind = [f"{k}: {dtype(state[k])} for a {p.dtype} parameter" for k, p in params.items()
                      if k in state and dtype(state[k]).kind != p.dtype.kind]
        problems = [f"mis-shaped: {', '.join(misshaped)}"] if misshaped else []
        problems += [f"wrong kind of number: {', '.join(wrong_kind)}"] if wrong_kind else []
        if strict:
            problems += [f"missing: {', '.join(missing)}"] if missing else []
            problems += [f"unexpected: {', '.join(unexpected)}"] if unexpected else []
        if problems:
            raise ValueError(f"load_state_dict into {type(self).__name__} failed; "
                             + "; ".join(problems))
        for k, p in params.items():
            if k not in state:
                continue
            value = backend.asarray(data_of(state[k]), dtype=p.dtype)
            if backend.device_of(p.data) == backend.device:
                # in place: views into the parameter (Adam's flat buffer) stay valid;
                # a graph that saved p before refuses backward
                p.assign(value)
            else:  # a model built on the other device moves to the current one
                p.data = value.copy()

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"  ({k}): " + repr(m).replace("\n", "\n  ") for k, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


def _check_sizes(owner, **sizes):
    """Each size is an integer >= 1 (Linear(d / 2, ...) gives a float), or one sentence says so."""
    for name, n in sizes.items():
        check_int(owner, name, n, 1)


class Linear(Module):
    """y = x W + b, W: (d_in, d_out), one GEMM over the flattened leading axes (F.linear).

    Xavier-uniform W (Glorot and Bengio, 2010): U(-a, a), a = sqrt(6 / (d_in + d_out)), keeps the
    variance of activations and of gradients roughly equal from layer to layer. Bias starts at zero.
    """

    def __init__(self, d_in, d_out, bias=True):
        super().__init__()
        _check_sizes("Linear", d_in=d_in, d_out=d_out)
        self.d_in = d_in
        self.d_out = d_out
        a = math.sqrt(6.0 / (d_in + d_out))
        self.weight = Parameter(backend.host_rng().uniform(-a, a, (d_in, d_out)))
        self.bias = Parameter(np.zeros(d_out)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)  # (..., d_in) -> (..., d_out)

    def extra_repr(self):
        return f"d_in={self.d_in}, d_out={self.d_out}, bias={self.bias is not None}"


class Embedding(Module):
    """weight[ids]: (...,) -> (..., d). Initialised N(0, d^-1/2): the model multiplies embeddings by
    sqrt(d_model) (paper 3.4), so they enter with unit scale, as in tensor2tensor; the same matrix,
    when tied to the pre-softmax projection, then gives logits of unit scale too."""

    def __init__(self, num_embeddings, d):
        super().__init__()
        _check_sizes("Embedding", num_embeddings=num_embeddings, d=d)
        self.num_embeddings = num_embeddings
        self.d = d
        self.weight = Parameter(backend.host_rng().normal(0.0, d ** -0.5, (num_embeddings, d)))

    def forward(self, ids):
        return F.embedding(self.weight, ids)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.d}"


class LayerNorm(Module):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis; gamma ones, beta zeros.
    Note: the paper gives no eps; 1e-6 as in tensor2tensor."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        _check_sizes("LayerNorm", d=d)
        check_real("LayerNorm", "eps", eps, 0.0, low_open=True)
        self.d = d
        self.eps = eps
        self.gamma = Parameter(np.ones(d))
        self.beta = Parameter(np.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, self.gamma, self.beta, self.eps)

    def extra_repr(self):
        return f"{self.d}, eps={self.eps}"


class Dropout(Module):
    """x * keep / (1 - p), keep ~ Bernoulli(1 - p), while training (inverted dropout); eval: x."""

    def __init__(self, p):
        super().__init__()
        check_real("Dropout", "p", p, 0.0, 1.0)
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ...: indexable, iterable, appendable."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList holds Modules, got {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        n = len(self._modules)
        if not -n <= i < n:
            raise IndexError(f"ModuleList index {i} out of range for {n} modules")
        return self._modules[str(i % n)]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)

