"""The library files a workflow script runs: the transitive closure of the rapidllm modules it imports.

Snakemake reruns a job when a declared input is newer than its output, but it cannot see the Python modules a
script imports. Each rule therefore declares this closure as its `code` input (workflow/rules/common.smk), so
an edit anywhere the script's code reaches reruns the rule, and an edit it cannot reach does not. The closure
is computed from the source with `ast` (no import is executed): every `import` / `from ... import` statement,
at any depth of a module (function-level imports count), plus the `__init__.py` of every enclosing package,
which Python runs first. Modules loaded by a string (`importlib.import_module`) are not followed; the lazy
exports of `rapidllm/__init__.py` are the only such loads, and no script uses them.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = "rapidllm"


def module_file(name: str, lib: Path) -> Path | None:
    """The source file of a dotted rapidllm module name under `lib`, or None when it is not one."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    base = lib.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _enclosing(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: packages whose `__init__` runs before the module."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _package_of(path: Path, lib: Path) -> str:
    """Dotted package a file belongs to (`rapidllm/a/b.py` and `rapidllm/a/__init__.py` -> `rapidllm.a`)."""
    return ".".join(path.relative_to(lib).parts[:-1])


def imported_names(path: Path, lib: Path | None = None) -> set[str]:
    """Dotted names of the rapidllm modules `path` imports directly (with their enclosing packages).

    `from rapidllm.x import y` names `rapidllm.x.y` too when y is a submodule. Relative imports are resolved
    against `path`'s package (needs `lib`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level and lib is not None:
                package = _package_of(path.resolve(), lib.resolve()).split(".")
                anchor = package[:len(package) - node.level + 1]
                module = ".".join(p for p in [*anchor, module] if p)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    found = {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}
    return found | {p for n in found for p in _enclosing(n)}


@functools.lru_cache(maxsize=None)
def _direct(path: Path, lib: Path) -> frozenset[Path]:
    files = (module_file(name, lib) for name in imported_names(path, lib))
    return frozenset(f.resolve() for f in files if f is not None)


def import_depths(script: Path, lib: Path) -> dict[Path, int]:
    """Every rapidllm source file `script` reaches through imports, with its import distance (1 = imported by
    the script itself), breadth first."""
    lib = lib.resolve()
    depths: dict[Path, int] = {}
    frontier = [script.resolve()]
    depth = 0
    while frontier:
        depth += 1
        nxt = []
        for path in frontier:
            for f in sorted(_direct(path, lib)):
                if f not in depths:
                    depths[f] = depth
                    nxt.append(f)
        frontier = nxt
    return depths


def code_inputs(script: Path, lib: Path, root: Path) -> list[str]:
    """The closure as sorted paths relative to `root` (the working directory of the workflow)."""
    return sorted(str(p.relative_to(root.resolve())) for p in import_depths(script, lib))
