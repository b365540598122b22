"""Your exercise is yours: the package's own form of a function may not stand in for it.

While a checker grades your `name`, each package function listed under `name` below is replaced by
a guard; a call to it whose stack passes through your file fails the function with one line naming
what was called. Everything else of the package stays yours to use (Tensor, nn.Linear, softmax in
a cross-entropy backward, ...), and the grader's references call the listed functions freely: only
calls made from your file are refused. A name bound in your file (`from minitransformer.plain
import beam_search`) and the package's re-exports (`mt.gradcheck`) are found by identity and
guarded too.

    with guarded("beam_search", path):      # path: the file being graded
        check(fn, g)
"""
import contextlib
import importlib
import os
import sys

from checks.common import Fail

P = "minitransformer."
# exercise -> "module:attribute" (or "module:Class.method") of the package's forms of it
PACKAGE_FORMS = {
    "mul": ["ops:mul"],
    "matmul": ["ops:matmul", "backend:matmul"],
    "reduce_sum": ["ops:sum", "ops:mean"],
    "numeric_gradient": ["gradcheck:gradcheck"],
    "gradcheck": ["gradcheck:gradcheck"],
    "softmax": ["functional:softmax_array", "functional:softmax", "functional:log_softmax_array",
                "functional:log_softmax", "plain:softmax", "plain:log_softmax"],
    "softmax_backward": ["functional:softmax", "functional:log_softmax"],
    "cross_entropy_backward": ["functional:cross_entropy", "plain:cross_entropy"],
    "layer_norm_backward": ["functional:layer_norm", "plain:layer_norm"],
    "linear_backward": ["functional:linear", "plain:linear"],
    "FeedForward": ["transformer:FeedForward"],          # a class: its __init__, and no subclass
    "causal_mask": ["attention:causal_mask"],
    "attention_forward": ["attention:attention_forward", "attention:scaled_dot_product_attention",
                          "multihead:multi_head_attention", "plain:attention",
                          "plain:multi_head_attention"],
    "attention_backward": ["attention:attention_backward",
                           "attention:scaled_dot_product_attention"],
    "sinusoids": ["transformer:sinusoids", "transformer:PositionalEncoding"],
    "count_parameters": ["config:count_parameters"],
    "merge": ["text.bpe_learn:merge", "text.bpe_learn:apply_merges",
              "text.bpe_learn:apply_merges_naive"],
    "learn_merges": ["text.bpe_learn:learn_merges", "text.bpe_learn:learn_merges_naive",
                     "text.bpe:BPE.train", "text.bpe:BPE.train_naive"],
    "encode": ["text.bpe:BPE.encode", "text.bpe:BPE.encode_batch", "text.bpe_learn:apply_merges",
               "text.bpe_learn:apply_merges_naive"],
    "noam_lr": ["optim:noam_schedule", "optim:WarmupSchedule", "plain:noam_schedule"],
    "adam": ["optim:Adam", "plain:adam"],
    "length_penalty": ["search:length_penalty"],
    "beam_search": ["search:beam_search", "search:greedy_search", "plain:beam_search",
                    "plain:greedy_search"],
    "layer_norm": ["functional:layer_norm", "plain:layer_norm"],
}


def _resolve(target):
    """(owner, attribute, raw value) of "module:attr" or "module:Class.method"; a class itself
    stands for its __init__ (the class stays a class for the package's isinstance)."""
    module_name, _, dotted = target.partition(":")
    owner = importlib.import_module(P + module_name)
    *classes, attribute = dotted.split(".")
    for name in classes:
        owner = getattr(owner, name)
    if isinstance(vars(owner)[attribute], type):
        owner = vars(owner)[attribute]
        attribute = "__init__"
    return owner, attribute, vars(owner)[attribute]


def _from_file(path):
    """Whether the calling stack passes through the file `path`."""
    frame = sys._getframe(2)
    while frame is not None:
        if os.path.realpath(frame.f_code.co_filename) == path:
            return True
        frame = frame.f_back
    return False


def _guard(original, target, name, path):
    """`original` (a function or class) behind a check of who calls it."""
    def guard(*args, **kwargs):
        if _from_file(path):
            raise Fail(f"your {name} calls the package's {target.replace(':', '.')}: the "
                       f"exercise is to write it yourself (the package's form is the reference)")
        return original(*args, **kwargs)
    return guard


def _wrapped(raw, target, name, path):
    """The guard in the form the attribute had (a class method stays one)."""
    if isinstance(raw, (classmethod, staticmethod)):
        return type(raw)(_guard(raw.__func__, target, name, path))
    return _guard(raw, target, name, path)


@contextlib.contextmanager
def guarded(name, path, module=None):
    """While grading exercise `name` of the file `path` (its loaded `module`, if any): the
    package's forms of it refuse calls from that file."""
    path = os.path.realpath(path)
    undo = []
    yours = getattr(module, name, None)
    try:
        for target in PACKAGE_FORMS.get(name, ()):
            theirs = getattr(importlib.import_module(P + target.split(":")[0]),
                             target.split(":")[1].split(".")[0])
            inner = getattr(yours, "func", getattr(yours, "__wrapped__", None))  # partial, wraps
            if (yours is theirs or inner is theirs or isinstance(yours, type)
                    and isinstance(theirs, type) and issubclass(yours, theirs)):
                raise Fail(f"your {name} is the package's {target.replace(':', '.')} "
                           f"(or made from it): the exercise is to write it yourself")
            owner, attribute, raw = _resolve(target)
            value = getattr(owner, attribute)
            guard = _wrapped(raw, target, name, path)
            setattr(owner, attribute, guard)
            undo.append((owner, attribute, raw))
            # the same object under other names: re-exports, and names bound in the graded file
            places = [m for n, m in list(sys.modules.items()) if n.startswith(P) or n == P[:-1]]
            for place in places + ([module] if module is not None else []):
                for other, bound in list(vars(place).items()):
                    if bound is value and place is not owner:
                        setattr(place, other, getattr(owner, attribute))
                        undo.append((place, other, bound))
        yield
    finally:
        for owner, attribute, raw in reversed(undo):
            setattr(owner, attribute, raw)
