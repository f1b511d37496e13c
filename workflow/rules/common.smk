# Shared helpers for the rules: which studies exist, how many shards each has, and which library
# modules each rule's script imports (declared as inputs, since Snakemake does not track imported code).
import math
import os
from pathlib import Path

from snakemake.exceptions import WorkflowError

from rapidllm.pipeline.code_inputs import code_inputs
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import count_cases, load_experiment, referenced_spec_files
from rapidllm.spec.schema import load_yaml, validate
from rapidllm.validate.suites import load_suite

try:
    validate(config, "config", "config/config.yaml")
except SpecError as err:
    raise WorkflowError(str(err)) from None
SHARD_SIZE = int(config.get("shard_size", 64))
LIB = Path("lib/rapidllm")


def _named(name, key, folder):
    """config/config.yaml's name under `key` as its file in `folder`, or one line listing the known names."""
    path = Path(folder) / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(folder).glob("*.yaml")))
        raise SpecError(f"config/config.yaml: {key}: unknown name {name!r}; known: {known}")
    return path


def _study(name, key, folder):
    path = _named(name, key, folder)
    if key == "experiments":
        return str(path), load_experiment(path, SHARD_SIZE), None
    suite = load_suite(path)
    return str(path), suite.experiment, os.path.relpath(suite.reference)


try:
    STUDIES = {name: _study(name, "experiments", "config/experiments") for name in config["experiments"]}
    STUDIES.update({name: _study(name, "suites", "validation/suites") for name in config["suites"]})
except SpecError as err:
    raise WorkflowError(str(err)) from None


def study_file(w):
    return STUDIES[w.exp][0]


def study_kind(w):
    return "experiment" if STUDIES[w.exp][2] is None else "suite"


def study_inputs(w):
    path, exp, reference = STUDIES[w.exp]
    return [path] + referenced_spec_files(exp) + ([reference] if reference else [])


def shards(exp):
    return range(max(1, math.ceil(count_cases(STUDIES[exp][1]) / STUDIES[exp][1].shard_size)))


def script_code(script):
    """Every rapidllm source file workflow/scripts/{script}.py reaches through its imports (transitively),
    computed from the code (rapidllm/pipeline/code_inputs.py): an edit anywhere there reruns the rule."""
    path = Path("workflow/scripts") / f"{script}.py"
    if not path.is_file():
        raise WorkflowError(f"script_code({script!r}): no such script {path}")
    return code_inputs(path, LIB.parent, Path.cwd())


# Example cases whose simulated step the pipeline draws as a timeline (workflow/rules/explore.smk).
TIMELINE_CASES = ["gpt175b-tp8-pp8"]


def timeline_specs(w):
    """The case file and the named model / hardware / network files it uses."""
    case = load_yaml(Path(f"examples/{w.case}.yaml"))
    kinds = {"model": "models", "hardware": "hardware", "network": "networks"}
    named = [f"config/{folder}/{case[k]}.yaml" for k, folder in kinds.items() if isinstance(case[k], str)]
    return [f"examples/{w.case}.yaml"] + named


# Best-layout searches (workflow/rules/search.smk): config/searches/{search}.yaml, run as SEARCH_SHARDS jobs.
from rapidllm.search.spec import load_search, referenced_spec_files as search_spec_files

SEARCHES = config.get("searches", [])
try:    # an unknown name or a bad spec stops the run here, in one line, before a shard job writes anything
    for _name in SEARCHES:
        load_search(_named(_name, "searches", "config/searches"))
except SpecError as err:
    raise WorkflowError(str(err)) from None
SEARCH_SHARDS = int(config.get("search_shards", 4))


def search_inputs(w):
    path = f"config/searches/{w.search}.yaml"
    return [path] + search_spec_files(path)


# The paper's case studies (workflow/rules/case_studies.smk): every experiment named case-{kind}[-...].
from rapidllm.validate.case_studies import KINDS as CASE_STUDY_KINDS, check_study

CASE_STUDIES = [name for name in config["experiments"]
                if any(name == f"case-{k}" or name.startswith(f"case-{k}-") for k in CASE_STUDY_KINDS)]
try:    # what each study's table reads, before its sweep runs
    for _name in CASE_STUDIES:
        check_study(_name, STUDIES[_name][1])
except SpecError as err:
    raise WorkflowError(str(err)) from None
