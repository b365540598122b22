"""The lessons' figures and the numbers they quote from the code.

Figures: every image a lesson shows exists under lessons/img/, every file there is shown by a lesson,
lessons/figures.py knows how to draw each one, and one cheap figure is drawn to prove the code runs.
Quotes: every number a lesson's prose takes from the code (a default, a table the code prints, a line
count, a measured time recorded in the code) is checked here against the code, or in the lesson's own
```python blocks (marked below), so that text and code cannot drift apart silently.
"""
import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt

pytestmark = pytest.mark.usefixtures("on_cpu")   # the lessons' code is NumPy code

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
IMG = LESSONS / "img"
LESSON_FILES = sorted(LESSONS.glob("[0-9][0-9]_*.md"))
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)|<img[^>]*\ssrc=\"([^\"]+)\"")

spec = importlib.util.spec_from_file_location("lesson_figures", LESSONS / "figures.py")
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def text(name):
    return next(p for p in LESSON_FILES if p.name.startswith(name)).read_text(encoding="utf-8")


def references():
    """(lesson file, alt text, target) of every image in the lessons (and their README)."""
    out = []
    for path in LESSON_FILES + [LESSONS / "README.md"]:
        for m in IMAGE.finditer(path.read_text(encoding="utf-8")):
            out.append((path.name, m.group(1) or "", m.group(2) or m.group(3)))
    return out


# ==================================================================== figures
def test_every_referenced_image_exists_under_img():
    refs = references()
    assert refs, "no lesson shows an image"
    for lesson, alt, target in refs:
        assert target.startswith("img/") and target.endswith(".png"), f"{lesson}: {target} is not img/*.png"
        assert (LESSONS / target).is_file(), f"{lesson} shows {target}, which does not exist: python lessons/figures.py"
        assert len(alt) >= 20, f"{lesson}: the image {target} needs an alt text that says what it shows"


def test_no_orphan_images():
    shown = {Path(target).name for _, _, target in references()}
    on_disk = {p.name for p in IMG.iterdir()}
    assert on_disk - shown == set(), f"images in lessons/img/ that no lesson shows: {sorted(on_disk - shown)}"


def test_figures_py_draws_every_image_and_nothing_else():
    on_disk = {p.stem for p in IMG.glob("*.png")}
    assert set(figures.FIGURES) == on_disk
    for name, fn in figures.FIGURES.items():
        assert callable(fn) and fn.__doc__, f"{name}: one documented function per figure"
        assert any(f"img/{name}.png" in p.read_text(encoding="utf-8") for p in LESSON_FILES
                   if p.name.startswith(name[:3])), f"{name}.png is not shown by lesson {name[:2]}"


def test_images_stay_small():
    sizes = {p.name: p.stat().st_size for p in IMG.iterdir()}
    assert all(s < 300_000 for s in sizes.values()), sizes
    assert sum(sizes.values()) < 1_500_000, f"lessons/img/ holds {sum(sizes.values()) / 1e6:.2f} MB"
    for p in IMG.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{p.name} is not a PNG"


def test_selecting_figures_by_lesson_or_name():
    assert figures.select(["09"]) == [n for n in figures.FIGURES if n.startswith("09_")]
    assert figures.select(["9", "03_gradcheck_eps"]) == figures.select(["09"]) + ["03_gradcheck_eps"]
    assert figures.select([]) == list(figures.FIGURES)
    with pytest.raises(SystemExit, match="no figure named"):
        figures.select(["nonsense"])
    with pytest.raises(SystemExit, match="has no figure"):
        figures.select(["02"])


def test_one_figure_draws(tmp_path):
    pytest.importorskip("matplotlib", reason="drawing the figures needs matplotlib (pip install -e .[plot])")
    path = figures.draw("09_lr_schedule", tmp_path)
    assert path == tmp_path / "09_lr_schedule.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    fig = figures.FIGURES["06_masks"]()
    assert len(fig.axes) == 4 and fig.axes[1].get_title().startswith("causal_mask(4)")


def render(fig):
    """Draw a Figure on an Agg canvas; returns its renderer and its pixels (H, W, 4)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer(), np.asarray(canvas.buffer_rgba()).copy()


def curve_points(fig):
    """Display coordinates (N, 2) of every curve of every panel, sampled along its segments and kept
    where the panel shows them; straight rules (axvline, axhline: two points) and lone markers left out."""
    out = [np.empty((0, 2))]
    for ax in fig.axes:
        for line in ax.lines:
            xy = line.get_transform().transform(line.get_xydata())
            xy = xy[np.isfinite(xy).all(axis=1)]
            if not line.get_visible() or len(xy) < 3:
                continue
            if line.get_linestyle() not in ("None", "", " "):    # the segments, ten points each
                t = np.linspace(0, 1, 10)[:, None, None]
                xy = (xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2)
            out.append(xy[[ax.bbox.contains(x, y) for x, y in xy]])
    return np.concatenate(out)


@pytest.mark.parametrize("name", list(figures.FIGURES))
def test_each_figure_is_readable(name, monkeypatch):
    """Drawn afresh, a figure has nothing outside its canvas, no text or legend across a curve, every
    labelled line visible (hiding it changes the picture), axis labels and a colour bar on every heat map,
    and the size of the committed PNG (a figure changed but not redrawn fails here)."""
    pytest.importorskip("matplotlib", reason="drawing the figures needs matplotlib (pip install -e .[plot])")
    from matplotlib.legend import Legend
    from matplotlib.text import Text
    monkeypatch.setattr(figures, "LOSS_CURVE_STEPS", 100)     # 09_loss_curve: the same layout, a shorter run
    fig = figures.FIGURES[name]()
    renderer, _ = render(fig)                        # as saved; constrained layout settles in this first draw
    canvas = fig.bbox
    box = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)      # inches -> pixels
    assert (box.x0 >= -1 and box.y0 >= -1 and box.x1 <= canvas.x1 + 1 and box.y1 <= canvas.y1 + 1), \
        f"{name}: something is cut off at the edge: drawn over {box.extents.round()}, canvas {canvas.extents}"
    points = curve_points(fig)
    for artist in [a for ax in fig.axes for a in ax.get_children() if isinstance(a, (Text, Legend))]:
        if not artist.get_visible() or isinstance(artist, Text) and not artist.get_text().strip():
            continue
        area = artist.get_window_extent(renderer).padded(-1)
        on = [(x, y) for x, y in points if area.contains(x, y)]
        label = artist.get_text() if isinstance(artist, Text) else "the legend"
        assert not on, f"{name}: {label!r} lies across a curve at {np.round(on[:3])}"
    for ax in fig.axes:
        for text in ax.texts:
            bb = text.get_window_extent(renderer)
            assert ax.bbox.padded(1).count_contains([(bb.x0, bb.y0), (bb.x1, bb.y1)]) == 2, \
                f"{name}: {text.get_text()!r} runs over the frame of its panel"
    pixels = render(fig)[1]
    for line in [line for ax in fig.axes for line in ax.lines if not line.get_label().startswith("_")]:
        line.set_visible(False)
        changed = (np.abs(render(fig)[1].astype(int) - pixels).max(axis=2) > 64).sum()   # not just its rim
        line.set_visible(True)
        assert changed >= 100, f"{name}: the line {line.get_label()!r} of the legend is hidden by others"
    heat_maps = [ax for ax in fig.axes for im in ax.images if im.cmap.N > 2]   # not a two-colour mask
    assert all(im.colorbar is not None for ax in heat_maps for im in ax.images), f"{name}: a heat map needs a colour bar"
    assert all(ax.get_xlabel() for ax in heat_maps), f"{name}: every heat map needs an x label"
    assert not heat_maps or any(ax.get_ylabel() for ax in heat_maps), f"{name}: the heat maps need a y label"
    png = (IMG / f"{name}.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert abs(width - canvas.width) <= 1 and abs(height - canvas.height) <= 1, \
        f"{name}.png is {width} x {height}, the figure draws {canvas.width:.0f} x {canvas.height:.0f}: python lessons/figures.py {name}"


# ==================================================================== quoted numbers
# Checked in the lessons' own blocks instead: gradcheck's defaults (03), learn_merges_naive's "about
# 20 lines" (08), layer_norm's eps and one graph node (11), Adam's betas and eps, the warmup and
# lr_scale defaults, label smoothing 0.1 and the demo's settings (09).

def test_lesson_07_parameter_table_is_what_the_code_counts():
    from minitransformer.config import TransformerConfig, count_parameters
    rows = re.findall(r"^\| (base|big) \| ([\d.]+)M \| ([\d.]+)M \| ([\d.]+)M \| ([\d.]+)M \| (\d+)M \(([-+][\d.]+)%\) \|$",
                      text("07_"), re.M)
    assert [r[0] for r in rows] == ["base", "big"], "lesson 07's parameter table changed shape"
    for name, emb, enc, dec, total, paper, pct in rows:
        cfg = getattr(TransformerConfig, name)(vocab_size=37000)
        n = count_parameters(cfg)
        assert f"{n / 1e6:.2f}" == total
        assert f"{cfg.vocab_size * cfg.d_model / 1e6:.2f}" == emb
        assert abs(float(enc) + float(dec) + float(emb) - n / 1e6) < 0.02
        assert f"{(n - float(paper) * 1e6) / (float(paper) * 1e6):+.2%}" == pct + "%"


def test_lesson_09_learning_rate_table_is_eq_3():
    from minitransformer.optim import noam_schedule
    rows = re.findall(r"^\| ([\d,]+) \| (0\.\d{6}) \| (0\.\d{6}) \|$", text("09_"), re.M)
    assert len(rows) == 9, "lesson 09's learning-rate table changed shape"
    for step, base, big in rows:
        s = int(step.replace(",", ""))
        assert (f"{noam_schedule(s, 512, 4000):.6f}", f"{noam_schedule(s, 1024, 4000):.6f}") == (base, big), step
    assert "(Step 1 gives $1.7 \\cdot 10^{-7}$.)" in text("09_")
    assert f"{noam_schedule(1, 512, 4000):.1e}" == "1.7e-07"


def test_lesson_09_demo_figures_are_those_recorded_in_the_demo():
    from minitransformer.text import demo_task as demo
    lesson, source = text("09_"), inspect.getsource(demo)
    assert "over 95% exact match" in lesson and "demo_task.py" in lesson
    assert "README.md" in source and demo.DEMO["steps"] == 1000
    assert f"the demo uses warmup {demo.DEMO['warmup_steps']} and factor {demo.DEMO['lr_scale']}" in lesson
    peak = demo.DEMO["lr_scale"] * 128 ** -0.5 * demo.DEMO["warmup_steps"] ** -0.5
    assert f"the demo's peak, {peak:.4f} at step {demo.DEMO['warmup_steps']}" in lesson


def test_lesson_06_and_04_constants():
    from minitransformer import attention, functional
    assert "set to $-10^9$" in text("06_") and attention.NEG == -1e9
    assert "we use $10^{-6}$" in text("04_")
    assert inspect.signature(functional.layer_norm).parameters["eps"].default == 1e-6
    assert inspect.signature(mt.nn.LayerNorm).parameters["eps"].default == 1e-6


def test_the_gpu_tuning_record_quotes_the_figures_of_the_committed_run():
    """The speed-ups and step times docs/gpu_tuning.md quotes (moved there from lesson 11) are
    those of results/gpu-run-h200/2026-11-25-a3c78e3-call1/; lesson 11 keeps the seam and its one
    computed figure."""
    import json
    record = " ".join((LESSONS.parent / "docs/gpu_tuning.md").read_text(encoding="utf-8").split())
    lesson = " ".join(text("11_").split())
    run = LESSONS.parent / "results/gpu-run-h200/2026-11-25-a3c78e3-call1/results.json"
    run = json.loads(run.read_text(encoding="utf-8"))
    run = run["stages"]
    speedups = {o["op"]: o["speedup"] for o in run["fused"]["result"]["ops"]}
    adam = speedups.pop("Adam update")
    assert f"ran {min(speedups.values()):.2f}-{max(speedups.values()):.2f}x faster" in record
    assert f"(Adam's update {adam:.2f}x)" in record and "All 63 parity tests" in record
    assert run["kernels"]["result"]["tests"] == 63 and run["kernels"]["result"]["failures"] == 0
    steps = {(r["framework"], r["preset"]): r["ms_per_step"]
             for r in run["train_step"]["result"]["fp32"]["results"]}
    for preset in ("tiny", "small", "base"):
        assert f"{preset} {steps['ours', preset]:.1f}" in record
        assert f"{steps['torch', preset]:.1f}" in record
    assert "if fast.on(" in inspect.getsource(mt.functional)
    assert "GB/s" not in "".join(code for _, code in _blocks("11_") if "device == \"gpu\"" not in code)
    assert round(64 * 30 * 37000 * 4 / 1e6) == 284 and "is 284 MB" in lesson


def test_no_unchecked_line_counts_in_the_lessons():
    """A module's length in lines is the quote that drifts first: only the checked one may stay."""
    checked = {("08_bpe.md", "about 20 lines")}
    for path in LESSON_FILES:
        prose = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
        for m in re.finditer(r"(?:about|some|roughly|under|over|nearly|~) ?\d[\d,]* lines\b|py`?,? \d[\d,]* lines\b",
                             " ".join(prose.split())):
            assert (path.name, m.group(0)) in checked, f"{path.name} quotes {m.group(0)!r}: check it or drop it"


def _blocks(name):
    spec_ = importlib.util.spec_from_file_location("lesson_runner_for_quotes", LESSONS / "run.py")
    runner = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(runner)
    return runner.blocks(next(p for p in LESSON_FILES if p.name.startswith(name)))


def test_timings_say_where_they_were_measured():
    """A time in seconds in the prose names the machine it was measured on."""
    for path in LESSON_FILES:
        prose = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
        for paragraph in prose.split("\n\n"):
            paragraph = " ".join(paragraph.split())
            if re.search(r"\b\d+(?:\.\d+)? ?(?:s|ms|seconds|minutes)\b(?![/-])", paragraph):
                assert any(machine in paragraph for machine in ("2-core CPU", "H100", "H200")), \
                    f"{path.name}: a timing without its machine: {paragraph[:120]!r}"
