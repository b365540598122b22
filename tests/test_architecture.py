"""The package keeps the shape docs/architecture.md draws: two wings (numeric, text) that import nothing
of each other, imports running down the layers, no import circle but tensor <-> ops, the fast wing
importing no lesson module, every module listed in the document, each subcommand of cli/ importing
only cli/common.py and the library, and the command line a leaf: nothing outside cli/ (the package,
examples, benchmarks, lessons) imports it. (The size of a module: tests/test_style.py.)"""
import ast
import re
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "minitransformer"
DOC = PACKAGE.parent / "docs" / "architecture.md"

TEXT = {"text", "text.fileio", "text.bpe_learn", "text.bpe", "text.corpus", "text.data", "text.demo_task"}
FAST = {"fast", "fast.kernels", "fast.kernel_source", "fast.cublas", "fast.gpu"}
LESSONS = {"functional", "nn", "attention", "multihead", "cache", "optim", "transformer"}
RUN = {"run", "run.host", "run.metrics", "run.distributed", "run.replay", "run.checkpoint", "run.rundir",
       "run.translation", "run.training", "run.pipeline"}
# the floors of docs/architecture.md, bottom (0) to top; a module imports only from its floor or below
LAYERS = [
    {"backend", "checks", "config"},                             # ground
    {"tensor", "ops", "profiler", "gradcheck", "plain"} | TEXT,  # the engine; the text wing beside it
    FAST,                                                        # whole-op alternatives (the speed wing)
    LESSONS,                                                     # fused ops, layers, the model
    {"search", "viz"},                                           # decoding, where the wings meet
    RUN,                                                         # training and translating runs
    {"cli", "__main__"},                                         # the command line
]
# the two wings: neither imports the other; they meet from search upwards
NUMERIC = {"tensor", "ops", "profiler", "gradcheck", "plain"} | FAST | LESSONS
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
ALLOWED_CIRCLE = {("ops", "tensor"), ("tensor", "ops")}


def modules():
    """{dotted name relative to the package ("cli.train", "tensor"; "fast" for fast/__init__.py): path},
    the package's own __init__ left out."""
    found = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = p
    return found


def imports(path):
    """The package modules a file imports, anywhere in it (function-level imports too)."""
    here = path.relative_to(PACKAGE).parent.parts   # the package a module (or an __init__) is in
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[:len(here) - node.level + 1])
            if node.module:
                found.add(".".join(base + node.module.split(".")))
            else:                                    # from . import ops, nn
                found.update(".".join(base + [a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minitransformer"):
            found.add(node.module.split(".", 1)[1] if "." in node.module else "")
    return {m for m in found if m}


def floor(name):
    """The floor of a module: its own, or its subpackage's (cli.train is on cli's)."""
    return LAYER_OF.get(name, LAYER_OF.get(name.split(".")[0]))


def test_the_numeric_and_text_wings_import_nothing_of_each_other():
    for name, path in modules().items():
        for wing, other in ((NUMERIC, TEXT), (TEXT, NUMERIC)):
            if name in wing:
                crossing = sorted(t for t in imports(path) if t in other)
                assert not crossing, f"{name} imports {crossing} of the other wing (docs/architecture.md)"


def test_the_fast_wing_imports_no_lesson_module():
    """fast/ holds whole-op alternatives the lesson modules call through one seam line: it reaches the
    engine (make_node, the backend), never the modules it stands in for."""
    for name, path in modules().items():
        if name in FAST:
            lessons = sorted(t for t in imports(path) if floor(t) is not None and floor(t) >= LAYER_OF["functional"])
            assert not lessons, f"{name} imports {lessons}: the fast wing stands below the lesson modules"


def test_imports_never_go_up_a_layer():
    mods = modules()
    for name, path in mods.items():
        assert floor(name) is not None, f"{name} is on no floor of docs/architecture.md"
        for target in imports(path):
            if floor(target) is None:
                continue
            assert floor(target) <= floor(name), \
                f"{name} (floor {floor(name)}) imports {target} (floor {floor(target)}): up the stack"


def test_no_import_circle_but_tensor_and_ops():
    mods = modules()
    graph = {n: {t for t in imports(p) if t != n and t in mods} for n, p in mods.items()}
    for a, targets in graph.items():          # every pair on a cycle shows up as a path a -> ... -> a
        for b in targets:
            seen, todo = set(), [b]
            while todo:
                n = todo.pop()
                if n == a:
                    assert (a, b) in ALLOWED_CIRCLE, f"import circle through {a} -> {b}"
                    break
                if n not in seen:
                    seen.add(n)
                    todo.extend(graph.get(n, ()))


def test_every_module_is_documented():
    doc = DOC.read_text(encoding="utf-8")
    for name, path in modules().items():
        if not name.startswith("cli") and name != "__main__":
            shown = path.relative_to(PACKAGE).as_posix().replace("__init__.py", "")
            assert f"`{shown}`" in doc, f"docs/architecture.md does not list {shown}"


def test_subcommands_import_only_common_and_the_library():
    for name, path in modules().items():
        if name.startswith("cli.") and name != "cli.common":
            others = {t for t in imports(path) if t.startswith("cli") and t not in ("cli.common", "cli")}
            assert not others, f"{name} imports {sorted(others)}: subcommands share only cli/common.py"


def imports_of_the_command_line(path):
    """The lines of a Python file that import minitransformer.cli (or a module of it), anywhere in it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        if any(n == "minitransformer.cli" or n.startswith("minitransformer.cli.") for n in names):
            found.append(node.lineno)
    return found


def test_the_command_line_is_a_leaf():
    root = PACKAGE.parent
    files = [p for p in PACKAGE.rglob("*.py") if "cli" not in p.relative_to(PACKAGE).parts[:1]]
    files += [p for folder in ("examples", "benchmarks", "lessons") for p in (root / folder).rglob("*.py")]
    assert len(files) > 40, "the files to check were not found"
    for path in files:
        if path.name == "__main__.py":  # `python -m minitransformer` runs the command line
            continue
        relative = path.is_relative_to(PACKAGE) and any(t.split(".")[0] == "cli" for t in imports(path))
        assert not (relative or imports_of_the_command_line(path)), \
            f"{path.relative_to(root)} imports minitransformer.cli: what it needs belongs in the library"


def test_the_leaf_rule_sees_every_form_of_import(tmp_path):
    for line in ("import minitransformer.cli", "from minitransformer.cli import demo",
                 "from minitransformer.cli.common import UsageError", "from minitransformer import cli",
                 "def f():\n    import minitransformer.cli.train as t"):
        (tmp_path / "x.py").write_text(line + "\n")
        assert imports_of_the_command_line(tmp_path / "x.py"), line
    (tmp_path / "x.py").write_text("from minitransformer import checks, client\nimport minitransformer.clip\n")
    assert not imports_of_the_command_line(tmp_path / "x.py")


def test_the_design_documents_of_the_founding_are_not_referred_to():
    for path in list(PACKAGE.rglob("*.py")) + [PACKAGE.parent / "README.md"]:
        assert not re.search(r"DESIGN\.md|STYLE\.md|\.\./shared/(DESIGN|STYLE)", path.read_text(encoding="utf-8")), path
