"""The layout of the tree (issues 15 and 25): the product stands alone, its layers import each
other only as ``MAY_IMPORT`` allows, its parts import each other one way, heavy libraries stay in
the model's layers, and no module outgrows its limit. Read from the sources with ``ast``, so a
function-level import counts as much as one at the top of a module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Counted as ruff format lays code out (one argument a line where a call does not fit in 120
# columns): the hand-wrapped 300 and 400 came to 370 and 430 when the tree was first formatted.
PRODUCT_MAX_LINES = 370  # gateway/**
OTHER_MAX_LINES = 430  # bench, tests, run_gateway.py


def module_files() -> dict[str, Path]:
    """Every module of gateway/ and bench/ by dotted name (a package by its ``__init__``)."""
    out = {}
    for package in ("gateway", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its source (any depth, any
    branch), and the packages Python runs on the way (``a.b.c`` runs ``a`` and ``a.b``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(above + ([node.module] if node.module else []))
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` mod
            targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    out = set()
    for target in targets:
        bits = target.split(".")
        out |= {".".join(bits[:n]) for n in range(1, len(bits) + 1)} & known
    out.discard(name)
    return out


# The layers of gateway/ (docs/ARCHITECTURE.md) and, for each, the layers it may import (its own
# always). ``base`` is the top level: errors, config, metrics and the package itself.
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "audio": {"base"},
    "kokoro": {"base"},
    "agent": {"base"},
    "engines": {"base", "kokoro"},
    "text": {"base"},
    "core": {"base", "audio", "kokoro", "agent", "engines", "text"},
    "web": {"base", "audio", "kokoro", "agent", "engines", "core", "text"},
    "ops": {"base", "audio", "kokoro", "agent", "engines", "core", "web", "text"},
}
# Of the engines layer, the other layers see only the contract and the import-string loader; a
# concrete engine is reached by ``create_engine`` (ops alone may name one, as a tool).
ENGINE_CONTRACT = {"gateway.engines", "gateway.engines.base"}
SEES_CONCRETE_ENGINES = {"engines", "ops"}
# Imported at a module's top level only in these layers; elsewhere inside the function that needs it.
HEAVY = {
    "torch",
    "onnxruntime",
    "onnx",
    "boto3",
    "botocore",
    "kokoro",
    "misaki",
    "awscrt",
    "aws_sdk_sagemaker_runtime_http2",
}
HEAVY_LAYERS = {"engines", "kokoro"}


def layer_of(module: str) -> str:
    """``gateway.core.pipeline`` -> core; the top-level modules (and ``gateway``) -> base."""
    bits = module.split(".")
    return bits[1] if len(bits) > 2 or (len(bits) == 2 and bits[1] in MAY_IMPORT) else "base"


def part_of(module: str) -> str:
    """bench; gateway.audio, gateway.agent, gateway.engines whole; each module or subpackage of
    the other layers (``gateway.core.pipeline``, ``gateway.web.transports``,
    ``gateway.kokoro.vocoder``); each top-level module (``gateway.config``)."""
    bits = module.split(".")
    if bits[0] == "bench":
        return "bench"
    if len(bits) > 2 and bits[1] in ("audio", "agent", "engines"):
        return ".".join(bits[:2])
    return ".".join(bits[:3])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def part_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        mine = graph.setdefault(part_of(name), set())
        mine |= {part_of(m) for m in imported(name, path, set(files))} - {part_of(name)}
    return graph


def test_the_import_reader_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from . import sib\nfrom ..audio import enc\n\ndef f():\n    import bench.common\n")
    known = {
        "gateway",
        "gateway.engines",
        "gateway.engines.sib",
        "gateway.audio",
        "gateway.audio.enc",
        "bench",
        "bench.common",
    }
    assert imported("gateway.engines.mod", source, known) == known - {"gateway.engines.mod"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_importing_the_app_loads_no_benchmark_or_test_code() -> None:
    code = (
        "import json, sys, gateway.web.app; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('bench', 'tests'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_product_never_imports_bench_or_tests() -> None:
    files = module_files()
    wrong = {
        name: sorted(m for m in imported(name, path, set(files)) if m.split(".")[0] == "bench")
        for name, path in files.items()
        if name.split(".")[0] == "gateway"
    }
    assert {n: m for n, m in wrong.items() if m} == {}
    tests_named = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "gateway").rglob("*.py")
        if any(a.split(".")[0] == "tests" for a in _absolute_imports(p))
    ]
    assert tests_named == []


def _absolute_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def test_no_import_cycle_between_parts() -> None:
    """bench, gateway.engines, gateway.audio, gateway.agent, each module and subpackage of the
    other layers and each top-level module: the parts import each other one way only."""
    graph = part_graph()
    assert {
        "bench",
        "gateway.engines",
        "gateway.kokoro.vocoder",
        "gateway.audio",
        "gateway.web.transports",
        "gateway.web.app",
        "gateway.core.pipeline",
        "gateway.config",
    } <= graph.keys()
    assert cycles(graph) == [], "parts that import each other, both ways"


def product_imports() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported(name, path, set(files)) for name, path in files.items() if name.split(".")[0] == "gateway"}


def test_every_product_module_is_in_a_layer_of_the_table() -> None:
    layers = {layer_of(name) for name in product_imports()}
    assert layers == set(MAY_IMPORT)
    base = sorted(name for name in product_imports() if layer_of(name) == "base")
    assert base == ["gateway", "gateway.config", "gateway.errors", "gateway.metrics"]


def test_layers_import_only_what_the_table_allows() -> None:
    """core never imports web or ops; engines never web, core or a transport; kokoro only the
    base; ops may import every layer and nothing imports ops."""
    wrong = {}
    for name, targets in product_imports().items():
        mine = layer_of(name)
        bad = sorted(t for t in targets if layer_of(t) != mine and layer_of(t) not in MAY_IMPORT[mine])
        if bad:
            wrong[name] = bad
    assert wrong == {}
    layer_graph = {layer: allowed - {layer} for layer, allowed in MAY_IMPORT.items()}
    assert cycles(layer_graph) == []


def test_engines_are_reached_only_through_their_contract() -> None:
    """Outside engines/ (and ops, the tools), only ``gateway.engines`` (the import-string
    loader) and ``gateway.engines.base`` (the Protocol, Capabilities) are imported."""
    wrong = {}
    for name, targets in product_imports().items():
        if layer_of(name) in SEES_CONCRETE_ENGINES:
            continue
        bad = sorted(t for t in targets if layer_of(t) == "engines" and t not in ENGINE_CONTRACT)
        if bad:
            wrong[name] = bad
    assert wrong == {}


def top_level_imports(path: Path) -> set[str]:
    """The top-level package names a module imports outside any function or class body."""
    names = set()
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_heavy_libraries_are_imported_at_module_level_only_in_the_model_layers() -> None:
    files = module_files()
    wrong = {
        name: sorted(top_level_imports(path) & HEAVY)
        for name, path in files.items()
        if name.split(".")[0] == "gateway" and layer_of(name) not in HEAVY_LAYERS
    }
    assert {n: h for n, h in wrong.items() if h} == {}


def test_serving_loads_no_heavy_library_until_an_engine_is_chosen() -> None:
    code = (
        "import json, sys, gateway.ops.cli, gateway.ops.server, gateway.web.app, gateway.web.container; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def line_counts(paths: list[Path], limit: int) -> dict[str, int]:
    """The modules of ``paths`` over ``limit`` lines, with their counts."""
    counts = {str(p.relative_to(ROOT)): len(p.read_text("utf-8").splitlines()) for p in paths}
    return {p: n for p, n in sorted(counts.items()) if n > limit}


def test_tooling_modules_are_within_their_line_limit() -> None:
    paths = [*(ROOT / "bench").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), ROOT / "run_gateway.py"]
    assert line_counts(paths, OTHER_MAX_LINES) == {}


def test_product_modules_are_within_their_line_limit() -> None:
    over = line_counts(list((ROOT / "gateway").rglob("*.py")), PRODUCT_MAX_LINES)
    assert over == {}, f"product modules over {PRODUCT_MAX_LINES} lines: {over}"
