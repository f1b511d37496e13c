"""docs/api.md's example must run as written: its Python code blocks are executed in order, in one
namespace, from the project root (their asserts check the breakdown and the ids), and a `# ...` comment line
right after a `print(...)` line is that print's output, so the page's numbers are the model's."""
from __future__ import annotations

import re

from rapidllm.spec.paths import project_root

DOC = project_root() / "docs" / "api.md"


def test_api_doc_code_blocks_run(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(project_root())
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    shown = [b.split("\n")[i + 1][2:] for b in blocks for i, line in enumerate(b.split("\n")[:-1])
             if line.startswith("print(") and b.split("\n")[i + 1].startswith("# ")]
    assert len(shown) >= 2
    for line in shown:
        assert line in printed, f"docs/api.md shows {line!r}; the code printed {printed}"
