"""lessons/capstone.py, the learner's functions training the translator: with lessons/solutions/ every
piece is the learner's, the demo trains at a reduced size through them, and each plugged-in op equals the
package's; with the untouched stubs every piece is the package's, said once; a wrong answer refuses the
whole run with the grader's hint (unless named with --package); a function that raises or runs out of
time while the capstone runs stops it, naming the call; each result says where it came from;
everything is bound back on exit; the command line."""
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import attention, optim, search
from minitransformer.text import bpe, bpe_learn
from minitransformer import functional as F
from minitransformer.text.bpe import BPE
from minitransformer.config import SearchConfig
from minitransformer.text.demo_task import QUICK

from conftest import f32_tol, task, tiny_model  # noqa: F401  (task: a fixture)

pytestmark = pytest.mark.usefixtures("on_cpu")   # the lessons' code is NumPy code

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
sys.path.insert(0, str(LESSONS))                   # capstone imports lessons/check.py and lessons/checks/
spec = importlib.util.spec_from_file_location("capstone", LESSONS / "capstone.py")
capstone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capstone)
NAMES = [name for _, name, _, _ in capstone.PIECES]
LINE = re.compile(r"^  \d\d (\S+) +-> (\S+) +(yours|the package's|REFUSED): ?(.*)$")


def pieces(out):
    """{function: (yours or the package's, the rest of its line)} from what choose() printed."""
    return {m[1]: (m[3], m[4]) for m in map(LINE.match, out.splitlines()) if m}


@pytest.fixture(scope="module")
def solutions():
    return capstone.choose(LESSONS / "solutions")[0]


def test_solutions_are_all_yours_and_train_the_demo(capsys):
    mine, refused = capstone.choose(LESSONS / "solutions")
    assert refused == {}
    lines = pieces(capsys.readouterr().out)
    assert sorted(lines) == sorted(NAMES) and all(whose == "yours" for whose, _ in lines.values())
    capstone.CALLS.clear()
    small = dict(QUICK, n_train=600, n_test=8, steps=12, max_tokens=300)
    with capstone.plugged(mine):
        match = capstone.run_demo(small)
    assert 0.0 <= match <= 1.0
    # the pieces on the demo's path ran (softmax and softmax_backward: the learner's attention does their work)
    ran = {name for name in NAMES if capstone.CALLS[name] > 0}
    assert ran == set(NAMES) - {"softmax", "softmax_backward"}, ran


def test_stubs_are_all_the_packages_said_once(capsys):
    assert capstone.choose(LESSONS / "exercises") == ({}, {})
    out = capsys.readouterr().out
    lines = pieces(out)
    assert sorted(lines) == sorted(NAMES)
    assert all(whose == "the package's" and text == "not implemented yet" for whose, text in lines.values())
    assert out.count("not implemented yet") == len(NAMES)


def test_a_wrong_answer_is_refused_with_the_graders_hint(tmp_path, capsys, monkeypatch):
    for path in (LESSONS / "solutions").glob("[0-9][0-9]_*.py"):
        shutil.copy(path, tmp_path / path.name)
    wrong = tmp_path / "04_functional.py"
    wrong.write_text(wrong.read_text().replace("return y * (dy - (dy * y).sum(axis=axis, keepdims=True))",
                                               "return y * dy"))
    (tmp_path / "10_decoding.py").write_text("syntax error(\n")
    mine, refused = capstone.choose(tmp_path)
    lines = pieces(capsys.readouterr().out)
    whose, text = lines["softmax_backward"]
    assert whose == "REFUSED" and text.startswith("refused by the grader") and "sum(dy * y)" in text
    for name in ("length_penalty", "beam_search"):
        assert lines[name][0] == "REFUSED" and "10_decoding.py does not load" in lines[name][1]
    wrong = {"softmax_backward", "length_penalty", "beam_search"}
    assert set(mine) == set(NAMES) - wrong and set(refused) == wrong
    ran = []
    monkeypatch.setattr(capstone, "run_all", lambda args, mine: ran.append(mine) or 0)
    assert capstone.main(["--exercises", str(tmp_path), "--quick"]) == 1 and ran == []     # nothing trains
    out = capsys.readouterr().out
    assert "REFUSED: 3 of your functions fail the grader" in out
    assert "--package softmax_backward,length_penalty,beam_search" in out
    # named with --package: the package's, said so, and the run goes on
    assert capstone.main(["--exercises", str(tmp_path), "--quick", "--package",
                          "softmax_backward,length_penalty,beam_search"]) == 0 and len(ran) == 1
    lines = pieces(capsys.readouterr().out)
    assert lines["softmax_backward"][0] == "the package's" and lines["softmax_backward"][1].endswith("(--package)")
    assert set(ran[0]) == set(NAMES) - wrong


def test_a_function_that_fails_while_the_capstone_runs_stops_it(monkeypatch, capsys):
    """Never the package's in silence: an error or an endless loop in one call ends the run, named."""
    def boom(x, axis=-1):
        if x.size > 3:
            raise ValueError("too big")
        return x
    capstone.PHASE[0] = "training the demo"
    capstone.CALLS.clear()
    softmax = capstone.guarded("softmax", boom, Path("04_functional.py"))
    assert softmax(np.zeros(2)).shape == (2,)
    with pytest.raises(capstone.Refused, match=r"your softmax, call 2, while training the demo: raised "
                                               r"ValueError: too big"):
        softmax(np.zeros(5))

    def endless(x, axis=-1):
        while True:
            pass
    monkeypatch.setattr(capstone.grader, "CPU_SECONDS", 0.2)
    capstone.CALLS.clear()
    with pytest.raises(capstone.Refused, match=r"your softmax, call 1, .*still running after 0.2 s of CPU time"):
        capstone.guarded("softmax", endless, Path("04_functional.py"))(np.zeros(2))

    def run_all(args, mine):
        raise capstone.Refused("your adam, call 7, while training the demo: raised ValueError: nan")
    monkeypatch.setattr(capstone, "run_all", run_all)
    assert capstone.main(["--solutions", "--quick"]) == 1
    out = capsys.readouterr().out
    assert "REFUSED: your adam, call 7" in out and "no number is reported" in out


def test_each_result_says_where_it_came_from(monkeypatch, capsys, solutions):
    monkeypatch.setattr(capstone, "run_demo", lambda settings, progress=False: 0.5)
    args = capstone.main.__globals__["argparse"].Namespace(quick=True, demo_only=False, no_progress=True)
    mine = {k: f for k, f in solutions.items() if k != "adam"}
    assert capstone.run_all(args, mine) == 0
    out = capsys.readouterr().out
    assert f"from: the {QUICK['n_test']:,} held-out lines, each translated by beam search (4 beams, alpha 0) with " \
           "your beam_search" in out and "the package's adam" in out
    assert capstone.run_all(args, {}) == 0
    assert "with the package's beam_search" in capsys.readouterr().out


def test_plugged_ops_equal_the_packages(solutions):
    """Forward and backward of every op built around a solution equal the package's in float32."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 16)).astype(np.float32) * 3
    gamma, beta = (rng.standard_normal(16).astype(np.float32) for _ in range(2))
    target = rng.integers(0, 16, (3, 5))
    target[0, :2] = 0
    q, k, v = (rng.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(3))
    mask = attention.causal_mask(5)

    def run():
        leaves = [mt.tensor(a, requires_grad=True) for a in (x, gamma, beta, q, k, v)]
        X, G, B, Q, K, Vt = leaves
        outs = [F.softmax(X), F.layer_norm(X, G, B), F.cross_entropy(X, target, ignore_index=0, label_smoothing=0.1),
                attention.scaled_dot_product_attention(Q, K, Vt, mask)]
        w = [rng_w.standard_normal(o.shape).astype(np.float32) for o in outs]
        sum((o * mt.tensor(wi)).sum() for o, wi in zip(outs, w)).backward()
        return [o.numpy() for o in outs] + [t.grad for t in leaves]

    rng_w = np.random.default_rng(1)
    package, package_softmax, package_layer_norm = run(), F.softmax, F.layer_norm
    with capstone.plugged(solutions):
        assert F.softmax is not package_softmax and F.layer_norm is not package_layer_norm
        rng_w = np.random.default_rng(1)
        yours = run()
    for a, b in zip(package, yours):
        assert a.shape == b.shape and a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=0, atol=f32_tol(64, max(1.0, float(np.abs(a).max()))))


def test_plugged_optimizer_schedule_and_tokenizer_equal_the_packages(solutions):
    w = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    grads = [np.random.default_rng(s).standard_normal(50).astype(np.float32) for s in (1, 2, 3)]

    def train():
        p = mt.tensor(w.copy(), requires_grad=True)
        opt, schedule = optim.Adam([p]), optim.WarmupSchedule(32, 2)
        for step, g in enumerate(grads, 1):
            p.grad = g.copy()
            opt.step(schedule(step))
        return p.numpy(), schedule(1), schedule(5)

    lines = ["the lower lowest newer newest", "wider widest low new"] * 3
    package = train(), BPE.train(lines, 300, min_frequency=1), None
    with capstone.plugged(solutions):
        yours = train(), BPE.train(lines, 300, min_frequency=1), None
        encoded = yours[1].encode("the newest lowest wider")
    np.testing.assert_allclose(yours[0][0], package[0][0], rtol=0, atol=f32_tol(3 * 20, 1.0))
    assert yours[0][1:] == pytest.approx(package[0][1:], rel=1e-15)
    assert yours[1].merges == package[1].merges
    assert encoded == package[1].encode("the newest lowest wider")


def test_plugged_beam_search_equals_the_packages(solutions, task):
    tok, pairs, _ = task
    model = tiny_model(tok, dropout=0.0)
    sources = [src for src, _ in pairs[:6]]
    config = SearchConfig(beam_size=3, alpha=0.6, max_len_b=8)
    package = search.beam_search(model, sources, config)
    with capstone.plugged(solutions):
        yours = search.beam_search(model, sources, config)
    assert [h[0].tokens for h in yours] == [h[0].tokens for h in package]
    np.testing.assert_allclose([h[0].score for h in yours], [h[0].score for h in package], rtol=f32_tol(40))


def test_plugged_beam_search_every_nth_line(solutions, task):
    """Multi30k's way: yours on every 2nd sentence (counted across calls), the package's on the rest."""
    tok, pairs, _ = task
    model = tiny_model(tok, dropout=0.0)
    sources = [src for src, _ in pairs[:7]]
    config = SearchConfig(beam_size=3, alpha=0.6, max_len_b=8)
    package = [h[0].tokens for h in search.beam_search(model, sources, config)]
    capstone.BEAM.clear()
    with capstone.plugged({"beam_search": solutions["beam_search"]}, beam_every=2):
        yours = [h[0].tokens for h in search.beam_search(model, sources[:3], config) +
                 search.beam_search(model, sources[3:], config)]
    assert yours == package and capstone.BEAM["lines"] == capstone.BEAM["same"] == 4    # lines 0, 2, 4, 6
    fixed = lambda step, k, max_len, alpha: ([5, 5, 5], -1.5)                       # not a search at all
    capstone.BEAM.clear()
    with capstone.plugged({"beam_search": fixed}, beam_every=3):
        outs = search.beam_search(model, sources, config)
    assert [h[0].tokens for h in outs] == [[5, 5, 5] if i % 3 == 0 else t for i, t in enumerate(package)]
    assert capstone.BEAM["lines"] == 3 and capstone.BEAM["same"] == sum(package[i] == [5, 5, 5] for i in (0, 3, 6))


def test_everything_is_bound_back(solutions):
    before = [getattr(*target) for _, _, target, _ in capstone.PIECES] + [bpe.learn_merges, bpe.apply_merges]
    with pytest.raises(RuntimeError):
        with capstone.plugged(solutions):
            assert bpe.apply_merges is not before[-1] and bpe_learn.apply_merges is not before[-1]
            raise RuntimeError("a run that fails")
    after = [getattr(*target) for _, _, target, _ in capstone.PIECES] + [bpe.learn_merges, bpe.apply_merges]
    assert all(a is b for a, b in zip(before, after))


def run_cli(*argv):
    return subprocess.run([sys.executable, str(LESSONS / "capstone.py"), *argv], capture_output=True, text=True,
                          timeout=120)


def test_help_has_examples():
    r = run_cli("--help")
    assert r.returncode == 0 and "python lessons/capstone.py --solutions" in r.stdout and "--quick" in r.stdout


@pytest.mark.parametrize("argv, words", [
    (["--bogus"], "unrecognized arguments"),
    (["--quick", "--data-dir", "x"], "--data-dir is for Multi30k"),
    (["--demo-only", "--fast-bpe"], "--fast-bpe is for Multi30k"),
    (["--exercises", "no/such/dir"], "no directory"),
    (["--solutions", "--exercises", "x"], "not allowed with"),
    (["--package", "softmax,sofmax"], "--package: no piece named sofmax"),
])
def test_bad_options_refused_in_one_sentence(argv, words):
    r = run_cli(*argv)
    assert r.returncode == 2 and words in r.stderr and r.stdout == ""
    assert len([line for line in r.stderr.splitlines() if "error" in line]) == 1


def test_data_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    r = run_cli("--data-dir", str(tmp_path / "f"))
    assert r.returncode == 2 and "is a file, not a directory" in r.stderr


def test_multi30k_part_runs_quick_at_the_bars_updates_in_one_rank(tmp_path):
    """The bar was set at --quick's 1,200 updates in one rank; the capstone keeps both when --quick trains
    longer, as 2 ranks."""
    seen = []

    class Example:                                     # examples/multi30k.py's main, recording its argv
        @staticmethod
        def main(argv):
            seen.append(argv)
            return 130                                 # as if interrupted: no BLEU
    assert capstone.run_multi30k(Example, tmp_path) is None
    argv = seen[0]
    assert argv[:5] == ["--quick", "--steps", "1200", "--ranks", "1"] and capstone.STEPS == 1200
    assert argv[argv.index("--data-dir") + 1] == str(tmp_path) and "--no-progress" in argv
