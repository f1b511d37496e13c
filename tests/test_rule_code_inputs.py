"""Snakemake does not notice edits to modules a script imports: every rule that runs a script must declare
the rapidllm packages the script imports (its `code=code(...)` input), or an edit there leaves stale
results (the pipeline's duplicate-case fix in `shard_cases` did not rerun the price and simulate rules until this held)."""
import re
from pathlib import Path

import pytest

from rapidllm.spec.paths import project_root

RULES = sorted((project_root() / "workflow" / "rules").glob("*.smk"))
IMPORT = re.compile(r"^from rapidllm\.(\w+)", re.M)


def rules_with_scripts() -> list[tuple[str, set[str], Path]]:
    out = []
    for path in RULES:
        for block in re.split(r"\n(?=rule \w+:)", path.read_text()):
            script = re.search(r'script:\s*\n\s*"\.\./scripts/(\w+\.py)"', block)
            if not script:
                continue
            code = re.search(r"code=code\(([^)]*)\)", block)
            declared = set(re.findall(r'"(\w+)"', code.group(1))) if code else set()
            name = re.match(r"rule (\w+):", block.lstrip()).group(1)
            out.append((name, declared | {"spec"}, project_root() / "workflow" / "scripts" / script.group(1)))
    return out


@pytest.mark.parametrize("name,declared,script", rules_with_scripts(), ids=lambda v: v if isinstance(v, str) else "")
def test_rule_declares_the_packages_its_script_imports(name, declared, script):
    # the job-log redirect every script starts with changes no result
    text = script.read_text().replace("from rapidllm.pipeline.io import log_to\n", "")
    imported = set(IMPORT.findall(text))
    assert imported <= declared, f"rule {name}: {script.name} imports {sorted(imported - declared)} not in code(...)"


def test_every_script_rule_was_found():
    assert len(rules_with_scripts()) >= 15
