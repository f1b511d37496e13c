"""docs/architecture.md's layout table must match the code: one row per package (or top-level module) of
lib/rapidllm, listing exactly the modules it holds, so a new engineer reading it finds every file."""
from __future__ import annotations

import re

from rapidllm.spec.paths import project_root

PKG = project_root() / "lib" / "rapidllm"
DOC = project_root() / "docs" / "architecture.md"


def layout_rows() -> dict[str, set[str]]:
    """First cell (`spec/`, `units.py`) -> module names in the last cell, from the table under ## Layout."""
    section = DOC.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = set(re.findall(r"`([\w.]+\.py)`", cells[2]))
    return rows


def code_layout() -> dict[str, set[str]]:
    out = {p.name: {p.name} for p in PKG.glob("*.py") if p.name != "__init__.py"}
    for pkg in PKG.iterdir():
        if (pkg / "__init__.py").is_file():
            out[f"{pkg.name}/"] = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")
                                   if p.name != "__init__.py"}
    return out


def test_layout_table_lists_every_module_of_lib():
    rows, code = layout_rows(), code_layout()
    assert sorted(rows) == sorted(code), "docs/architecture.md layout rows differ from lib/rapidllm's packages"
    for name, modules in code.items():
        assert rows[name] == modules, (f"{name}: missing from the doc {sorted(modules - rows[name])}, "
                                       f"not in the code {sorted(rows[name] - modules)}")


def test_every_row_states_its_job_in_one_sentence():
    section = DOC.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            job = re.sub(r"\([^)]*\)", "", cells[1])       # parentheses may hold examples
            assert job.endswith(".") and job.count(". ") == 0, f"{cells[0]}: {cells[1]!r}"
