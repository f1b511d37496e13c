"""Reruns are never stale: every rule that runs a script declares, as its `code` input, the transitive closure
of the rapidllm modules the script imports (workflow/rules/common.smk: `script_code`), so an edit anywhere the
script's code reaches makes `snakemake` schedule the rule again. (Before, the `trace` rule declared four
packages by hand while its imports reached engine/ and network/: editing engine/collectives.py (now
engine/comm_cost.py) reran `simulate` but not `trace`.)

Checked three ways: the rule names its own script; the modules really loaded when the script's imports run
are all in the computed closure; and, in one temp copy of the project with every output up to date, touching
the deepest module of each rule's closure makes `snakemake -n` schedule that rule for that file."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rapidllm.pipeline.code_inputs import code_inputs, import_depths
from rapidllm.spec.paths import project_root

ROOT = project_root()
LIB = ROOT / "lib"
COPIED = ("Snakefile", "workflow", "config", "validation", "lib", "scripts", "examples")


def rules_with_scripts() -> dict[str, tuple[str, str | None]]:
    """rule name -> (script it runs, script named in its code input) from workflow/rules/*.smk."""
    out = {}
    for path in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule \w+:)", path.read_text()):
            script = re.search(r'script:\s*\n\s*"\.\./scripts/(\w+)\.py"', block)
            if script:
                code = re.search(r'code=script_code\("(\w+)"\)', block)
                name = re.match(r"rule (\w+):", block.lstrip()).group(1)
                out[name] = (script.group(1), code.group(1) if code else None)
    return out


RULES = rules_with_scripts()


def script_path(script: str) -> Path:
    return ROOT / "workflow" / "scripts" / f"{script}.py"


def deepest_module(script: str) -> str:
    """The module furthest (in import steps) from the script; ties broken by name, for a stable choice."""
    depths = import_depths(script_path(script), LIB)
    far = max(depths.values())
    return str(min(p for p, d in depths.items() if d == far).relative_to(ROOT))


def test_every_script_rule_declares_the_closure_of_its_own_script():
    assert len(RULES) >= 15
    for rule, (script, declared) in RULES.items():
        assert declared == script, f"rule {rule} runs {script}.py but declares code=script_code({declared!r})"


# Runs each script's import statements in a forked child (numpy/pandas loaded once in the parent) and
# prints the source files of the rapidllm modules that end up loaded.
_LOADED = """
import ast, json, os, sys
import numpy, pandas, matplotlib, numba, jsonschema, yaml, pyarrow.parquet
out = {}
for script in sys.argv[1:]:
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        for node in ast.parse(open(script).read()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(ast.unparse(node), {})
        files = sorted(m.__file__ for n, m in list(sys.modules.items())
                       if n.split(".")[0] == "rapidllm" and getattr(m, "__file__", None))
        os.write(w, json.dumps(files).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out[script] = json.loads(f.read())
    os.wait()
print(json.dumps(out))
"""


def test_modules_loaded_at_run_time_are_in_the_computed_closure():
    scripts = sorted({s for s, _ in RULES.values()})
    env = {**os.environ, "PYTHONPATH": str(LIB), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", _LOADED, *map(str, map(script_path, scripts))],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.splitlines()[-1])
    for script in scripts:
        closure = set(code_inputs(script_path(script), LIB, ROOT))
        files = {str(Path(f).resolve().relative_to(ROOT)) for f in loaded[str(script_path(script))]}
        assert files, script
        assert files <= closure, f"{script}.py loads {sorted(files - closure)} outside its computed closure"


def _snakemake(cwd: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(cwd / "lib"), "RAPIDLLM_ROOT": str(cwd)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--rerun-triggers", "mtime", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _jobs(dry_run: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    """(rule, inputs, outputs, updated input files) of each job a dry run schedules."""
    def field(block: str, pattern: str) -> list[str]:
        found = re.search(pattern, block, re.M)
        return found.group(1).split(", ") if found else []

    return [(re.match(r"rule (\w+):", block).group(1), field(block, r"^\s+input: (.*)$"),
             field(block, r"^\s+output: (.*)$"), field(block, r"Updated input files: ([^;\n]*)"))
            for block in re.split(r"\n(?=rule \w+:)", dry_run)[1:]]


def _levels(jobs: list[tuple[str, list[str], list[str], list[str]]]) -> list[set[str]]:
    """Script rules grouped by their longest distance from a source rule: no rule of a group feeds another,
    so one dry run per group, with only that group's rules allowed to run, tests each rule on its own inputs
    (a rule rerun because its upstream reruns would not report its own updated inputs)."""
    producer = {out: rule for rule, _, outs, _ in jobs for out in outs}
    upstream: dict[str, set[str]] = {}
    for rule, ins, _, _ in jobs:
        upstream.setdefault(rule, set()).update(producer[i] for i in ins if i in producer)

    def level(rule: str) -> int:
        return 1 + max((level(u) for u in upstream[rule]), default=-1)

    groups: dict[int, set[str]] = {}
    for rule in RULES:
        groups.setdefault(level(rule), set()).add(rule)
    return [groups[k] for k in sorted(groups)]


@pytest.fixture(scope="module")
def up_to_date_copy(tmp_path_factory) -> tuple[Path, list]:
    """A copy of the project whose every workflow output exists and is newer than every source, and the jobs
    of the full workflow."""
    copy = tmp_path_factory.mktemp("project")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        src = ROOT / name
        (shutil.copytree(src, copy / name, ignore=ignore) if src.is_dir() else shutil.copy2(src, copy / name))
    jobs = _jobs(_snakemake(copy))
    assert {rule for rule, *_ in jobs} >= set(RULES)
    for f in copy.rglob("*"):
        if f.is_file():
            os.utime(f, (1_000_000_000, 1_000_000_000))
    for _, _, outs, _ in jobs:
        for out in outs:
            (copy / out).parent.mkdir(parents=True, exist_ok=True)
            (copy / out).touch()
            os.utime(copy / out, (1_100_000_000, 1_100_000_000))
    assert "Nothing to be done" in _snakemake(copy)
    return copy, jobs


def test_touching_a_deep_module_reruns_each_rule(up_to_date_copy):
    copy, jobs = up_to_date_copy
    deep = {rule: deepest_module(script) for rule, (script, _) in RULES.items()}
    for module in set(deep.values()):
        os.utime(copy / module, (1_200_000_000, 1_200_000_000))
    rerun: dict[str, set[str]] = {}
    for group in _levels(jobs):
        targets = [out for rule, _, outs, _ in jobs if rule in group for out in outs]
        for rule, _, _, updated in _jobs(_snakemake(copy, "--allowed-rules", *sorted(group), "--", *targets)):
            rerun.setdefault(rule, set()).update(updated)
    for rule, module in deep.items():
        assert module in rerun.get(rule, set()), f"touching {module} does not rerun rule {rule}"
    # the rule of the issue: the trace script reaches engine/ and network/ through pipeline/stages.py
    assert deep["trace"].startswith(("lib/rapidllm/engine/", "lib/rapidllm/network/"))
