"""The package keeps the shape docs/architecture.md draws: two wings (numeric, text) that import nothing
of each other, imports running down the layers, no import circle but tensor <-> ops, every module listed in the document, none over 320 lines, each
subcommand of cli/ importing only cli/common.py and the library, and the command line a leaf: nothing
outside cli/ (the package, examples, benchmarks, lessons) imports it."""
import ast
import re
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "minitransformer"
DOC = PACKAGE.parent / "docs" / "architecture.md"

# the layers of docs/architecture.md, bottom (0) to top
LAYERS = [
    {"backend", "checks", "cores"},
    {"tensor", "ops", "profiler", "fileio", "bpe_learn", "bpe", "corpus", "data", "demo_task"},
    {"functional", "kernels", "kernel_source", "cublas", "gradcheck", "plain"},
    {"attention", "multihead", "cache", "nn", "optim", "distributed", "launch", "graphs"},
    {"transformer", "config"},
    {"search", "translation", "viz"},
    {"checkpoint", "rundir", "metrics", "evaluation"},
    {"pipeline", "training", "trainer_checkpoints"},
    {"cli", "__main__"},
]
# the two wings of docs/architecture.md: neither imports the other; they meet from search upwards
NUMERIC = {"tensor", "ops", "profiler", "functional", "kernels", "kernel_source", "cublas", "gradcheck", "plain", "attention",
           "multihead", "cache", "nn", "optim", "distributed", "launch", "graphs", "transformer", "config"}
TEXT = {"fileio", "bpe_learn", "bpe", "corpus", "data", "demo_task"}
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
ALLOWED_CIRCLE = {("ops", "tensor"), ("tensor", "ops")}


def modules():
    """{dotted name relative to the package ("cli.train", "tensor"): path}, __init__ files left out."""
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p
            for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}


def imports(path):
    """The package modules a file imports, anywhere in it (function-level imports too)."""
    here = path.relative_to(PACKAGE).parent.parts
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


def top(name):
    return name.split(".")[0]


def test_the_numeric_and_text_wings_import_nothing_of_each_other():
    for name, path in modules().items():
        for wing, other in ((NUMERIC, TEXT), (TEXT, NUMERIC)):
            if top(name) in wing:
                crossing = sorted(top(t) for t in imports(path) if top(t) in other)
                assert not crossing, f"{name}.py imports {crossing} of the other wing (docs/architecture.md)"


def test_imports_never_go_up_a_layer():
    mods = modules()
    for name, path in mods.items():
        assert top(name) in LAYER_OF, f"{name} is in no layer of docs/architecture.md"
        for target in imports(path):
            if top(target) == top(name) or top(target) not in LAYER_OF:
                continue
            assert LAYER_OF[top(target)] <= LAYER_OF[top(name)], \
                f"{name} (layer {LAYER_OF[top(name)]}) imports {target} (layer {LAYER_OF[top(target)]}): up the stack"


def test_no_import_circle_but_tensor_and_ops():
    graph = {top(n): set() for n in modules()}
    for name, path in modules().items():
        graph[top(name)] |= {top(t) for t in imports(path) if top(t) != top(name) and top(t) in graph}
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


def test_every_module_is_documented_and_small():
    doc = DOC.read_text(encoding="utf-8")
    for name, path in modules().items():
        if not name.startswith("cli.") and name != "__main__":
            assert f"`{name}.py`" in doc, f"docs/architecture.md does not list {name}.py"
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= 320, f"{name}.py has {lines} lines: past ~300 lines a file holds two concepts"


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
        relative = path.is_relative_to(PACKAGE) and any(top(t) == "cli" for t in imports(path))  # from .cli import
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
