"""The grader refuses the package's own form of an exercise standing in for the learner's: called
from the graded file, bound under the exercise's name, wrapped in a partial, or subclassed; the
solutions, which use other parts of the package, still pass (lessons/checks/own_work.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHEATS = [
    ("04", "softmax", "import minitransformer.functional as F\n\n"
     "def softmax(x, axis=-1):\n    return F.softmax_array(x, axis)\n",
     "functional.softmax_array"),
    ("06", "attention_forward", "import minitransformer as mt\n"
     "from minitransformer import plain, backend\n\n"
     "def attention_forward(q, k, v, mask=None):\n"
     "    out = plain.attention(q, k, v, mask)\n"
     "    return out, None\n", "plain.attention"),
    ("09", "noam_lr", "from minitransformer.plain import noam_schedule as noam_lr\n",
     "plain.noam_schedule"),
    ("09", "noam_lr", "import functools\nfrom minitransformer.optim import noam_schedule\n"
     "noam_lr = functools.partial(noam_schedule)\n", "optim.noam_schedule"),
    ("09", "adam", "from minitransformer import plain\n\n"
     "def adam(p, g, m, v, t, lr, betas=(0.9, 0.98), eps=1e-9):\n"
     "    return plain.adam(p, g, m, v, t, lr, betas, eps)\n", "plain.adam"),
    ("10", "length_penalty", "import minitransformer as mt\n\n"
     "def length_penalty(length, alpha):\n"
     "    return mt.search.length_penalty(length, alpha)\n", "search.length_penalty"),
    ("05", "FeedForward", "from minitransformer import transformer\n\n"
     "class FeedForward(transformer.FeedForward):\n    pass\n", "transformer.FeedForward"),
    ("07", "sinusoids", "from minitransformer.transformer import sinusoids as _s\n\n"
     "def sinusoids(n_positions, d_model):\n    return _s(n_positions, d_model)\n",
     "transformer.sinusoids"),
]


@pytest.mark.parametrize("lesson, name, source, called", CHEATS,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CHEATS)])
def test_the_packages_own_form_is_refused(tmp_path, lesson, name, source, called):
    answer = tmp_path / "answer.py"
    answer.write_text(source)
    result = subprocess.run([sys.executable, "lessons/check.py", lesson, name, "--module",
                             str(answer)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    line = next(line for line in result.stdout.splitlines() if f" {name} " in line)
    assert result.returncode == 1 and "FAIL" in line, result.stdout
    assert f"the package's {called}" in line and "write it yourself" in line, line


def test_the_guard_is_lifted_after_grading():
    """The package's functions are themselves again once a function is graded."""
    sys.path.insert(0, str(ROOT / "lessons"))
    try:
        from checks.own_work import guarded
        import minitransformer.plain as plain
        before = plain.adam
        with guarded("adam", ROOT / "lessons/solutions/09_training.py"):
            assert plain.adam is not before
        assert plain.adam is before
    finally:
        sys.path.remove(str(ROOT / "lessons"))
