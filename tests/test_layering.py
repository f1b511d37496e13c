"""Imports point down only: units/spec -> ops, memory, network -> graph -> engine -> prediction -> search,
cost -> pipeline, validate, figures, explore, cli (docs/architecture.md). A package may import any package
of a lower tier, and, within its own tier, only the few edges listed in SIDEWAYS. The imports are read from
the source with `ast` (every `import` statement, function-level ones included), so an upward import
anywhere in lib/ fails here with the file and the module it imports."""
from __future__ import annotations

import shutil
from pathlib import Path

from rapidllm.pipeline.code_inputs import imported_names, module_file
from rapidllm.spec.paths import project_root

LIB = project_root() / "lib"

TIERS = (
    ("units", "spec", "caches", "jit"),
    ("ops", "memory", "network"),
    ("graph",),
    ("engine",),
    ("prediction",),
    ("search", "cost"),
    ("validate", "figures", "pipeline", "explore", "cli"),
)
TIER = {pkg: level for level, names in enumerate(TIERS) for pkg in names}
SIDEWAYS = {
    ("spec", "units"),          # specs parse unit strings
    ("spec", "caches"),         # named specs are built once per owner's memo tables
    ("spec", "jit"),            # the schedule order is a (lazily compiled) kernel
    ("memory", "ops"),          # the memory walk runs over the operator model's own lists
    ("search", "cost"),         # a search spec may rank by a cost column (objective: {column: usd_per_million_tokens})
    ("figures", "validate"),    # validation figures draw the error metrics
    ("pipeline", "validate"),   # the validation stages of the workflow
    ("pipeline", "figures"),    # a study stage draws its own figures beside its tables (pipeline/optimus.py)
    ("explore", "figures"),
    ("explore", "validate"),
    *(("cli", pkg) for pkg in ("validate", "figures", "pipeline", "explore")),
}
# The lazy public API of rapidllm/__init__.py re-exports prediction's and spec's names.
ROOT_EXPORTS = "prediction"


def package_of(path: Path, lib: Path = LIB) -> str:
    """Layer a lib/rapidllm file belongs to: its subpackage, or its own name for a top-level module.
    Command-line modules (cli*.py) belong to the cli layer wherever they sit."""
    rel = path.relative_to(lib / "rapidllm")
    if rel.name.startswith("cli"):
        return "cli"
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_packages(path: Path, lib: Path = LIB) -> dict[str, str]:
    """Layer -> one imported module name, for the rapidllm modules `path` imports."""
    out: dict[str, str] = {}
    for name in sorted(imported_names(path, lib)):
        target = module_file(name, lib)
        if target is not None and target != lib / "rapidllm" / "__init__.py":
            out.setdefault(package_of(target, lib), name)
        elif target is None and name.count(".") == 1:    # `from rapidllm import predict`: the lazy API
            out.setdefault(ROOT_EXPORTS, name)
    return out


def allowed(src: str, dst: str) -> bool:
    return src == dst or TIER[dst] < TIER[src] or (src, dst) in SIDEWAYS


def upward_imports(lib: Path = LIB) -> list[str]:
    bad = []
    for path in sorted((lib / "rapidllm").rglob("*.py")):
        if path == lib / "rapidllm" / "__init__.py":
            continue
        src = package_of(path, lib)
        for dst, name in imported_packages(path, lib).items():
            if not allowed(src, dst):
                bad.append(f"{path.relative_to(lib)} ({src}) imports {name} ({dst})")
    return bad


def test_every_package_has_a_layer():
    files = [p for p in (LIB / "rapidllm").rglob("*.py") if p != LIB / "rapidllm" / "__init__.py"]
    packages = {package_of(p) for p in files}
    assert packages <= set(TIER), f"add {sorted(packages - set(TIER))} to TIERS (and docs/architecture.md)"


def test_imports_point_down_only():
    bad = upward_imports()
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_the_public_api_module_loads_nothing_eagerly():
    # rapidllm/__init__.py runs before any rapidllm module: a static import there would make every module
    # depend on everything (and every workflow rule rerun on any edit).
    assert imported_packages(LIB / "rapidllm" / "__init__.py") == {}


def test_an_upward_import_is_caught(tmp_path):
    shutil.copytree(LIB / "rapidllm", tmp_path / "rapidllm")
    graph = tmp_path / "rapidllm" / "graph" / "comm_nodes.py"
    graph.write_text(graph.read_text() + "\n\ndef _late():\n    from rapidllm.engine import comm_cost\n")
    spec = tmp_path / "rapidllm" / "spec" / "case.py"
    spec.write_text(spec.read_text() + "\nfrom rapidllm import predict\n")
    assert upward_imports(tmp_path) == [
        "rapidllm/graph/comm_nodes.py (graph) imports rapidllm.engine (engine)",
        "rapidllm/spec/case.py (spec) imports rapidllm.predict (prediction)",
    ]
