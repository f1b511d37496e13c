# Shared helpers for the rules: which studies exist, how many shards each has, and which library
# modules each stage imports (declared as inputs, since Snakemake does not track imported code).
import math
from pathlib import Path

from rapidllm.spec.experiment import count_cases, load_experiment, referenced_spec_files
from rapidllm.spec.schema import load_yaml, validate
from rapidllm.validate.suites import load_suite

validate(config, "config", "config/config.yaml")
SHARD_SIZE = int(config.get("shard_size", 64))
LIB = Path("lib/rapidllm")


def _study(name):
    exp_path = Path("config/experiments") / f"{name}.yaml"
    if exp_path.exists():
        return str(exp_path), load_experiment(exp_path, SHARD_SIZE), None
    suite_path = Path("validation/suites") / f"{name}.yaml"
    suite = load_suite(suite_path)
    return str(suite_path), suite.experiment, str(suite.reference.relative_to(Path.cwd().resolve()))


STUDIES = {name: _study(name) for name in list(config["experiments"]) + list(config["suites"])}


def study_file(w):
    return STUDIES[w.exp][0]


def study_kind(w):
    return "experiment" if STUDIES[w.exp][2] is None else "suite"


def study_inputs(w):
    path, exp, reference = STUDIES[w.exp]
    return [path] + referenced_spec_files(exp) + ([reference] if reference else [])


def shards(exp):
    return range(max(1, math.ceil(count_cases(STUDIES[exp][1]) / STUDIES[exp][1].shard_size)))


def code(*packages):
    """Python sources of the named subpackages plus the spec layer every stage uses."""
    files = sorted(str(p) for pkg in ("spec", *packages) for p in (LIB / pkg).rglob("*.py"))
    return files + [str(LIB / "units.py")]
