"""Fuzzing the spec loader (hypothesis): random YAML text, random mappings and scalars, and valid cases with one
key replaced by a random value. Every outcome is a resolved Case or a SpecError: no other exception escapes,
so no input reaches the CLI as a traceback. Derandomized, so CI runs the same examples every time.
"""
from __future__ import annotations

import copy
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from bad_input_corpus import CASE, EXPERIMENT, HW, NET
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import check_experiment, load_experiment
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import NetworkSpec
from rapidllm.spec.schema import load_yaml

FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

QUANTITY_TEXT = st.builds(lambda n, u: f"{n} {u}", st.sampled_from(["-5", "0", "1e400", "nan", "inf", "2.5", "1e-30"]),
                          st.sampled_from(["GB", "GiB", "TB/s", "Gb/s", "us", "ms", "GHz", "TFLOP/s", "B", "", "parsec"]))
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | QUANTITY_TEXT
           | st.sampled_from(["gpt-175b", "a100-sxm4-80gb", "dgx-a100", "training", "inference", "auto", "fp8",
                              "../config", "selective", "interleaved"]))
KEYS = st.sampled_from(["model", "hardware", "network", "workload", "parallelism", "mode", "seq_len", "global_batch",
                        "tp", "pp", "dp", "ep", "dimensions", "size", "clock", "precision", "faults", "name",
                        "link_bandwidth", "latency", "topology", "hbm_capacity", "sm_count"]) | st.text(max_size=6)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
                      max_leaves=25)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested mapping/list (the places a mutation may hit)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _replace(base: dict, path: tuple, value: object) -> dict:
    out = copy.deepcopy(base)
    node = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


CASE_PATHS = _paths(CASE)


def _resolves_or_refuses(mapping: object) -> None:
    try:
        case = resolve_case(mapping, "fuzz.yaml")
    except SpecError as err:
        assert err.lines and all(line.startswith("fuzz.yaml") or ": " in line for line in err.lines)
        return
    assert len(case.case_id) == 16


@FUZZ
@given(VALUES)
def test_random_mapping(mapping: object) -> None:
    _resolves_or_refuses(mapping)


@FUZZ
@given(st.sampled_from(CASE_PATHS), VALUES)
def test_valid_case_with_one_key_replaced(path: tuple, value: object) -> None:
    _resolves_or_refuses(_replace(CASE, path, value))


@FUZZ
@given(st.sampled_from(["hardware", "network"]), st.data())
def test_inline_specs(kind: str, data: st.DataObject) -> None:
    base = HW if kind == "hardware" else NET
    mapping = _replace(base, data.draw(st.sampled_from(_paths(base))), data.draw(VALUES))
    try:
        m, where = resolve_named(kind, mapping, "fuzz.yaml", kind)
        (HardwareSpec if kind == "hardware" else NetworkSpec).from_mapping(m, where)
    except SpecError:
        pass


YAML_PIECES = st.sampled_from(["a: 1\n", "a: 1\na: 2\n", "&x [1, 2]\n", "*x\n", "- ", "{", "}", "[", "]", ": ",
                               "!!python/name:os.system ", "\t", "\xff", "model: gpt-175b\n", "? ", "<<: *x\n",
                               ".nan", "1e400", "'", '"', "\n", "  ", "#", "%YAML 1.1\n", "---\n", "..."])


@FUZZ
@given(st.lists(YAML_PIECES, max_size=12) | st.text(max_size=60).map(lambda t: [t]))
def test_random_yaml_text(tmp_path_factory, pieces: list[str]) -> None:
    path: Path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_bytes("".join(pieces).encode("utf-8", "surrogateescape"))
    try:
        data = load_yaml(path)
    except SpecError as err:
        assert len(err.lines) == 1 and "spec.yaml" in err.lines[0]
        return
    _resolves_or_refuses(data)
    try:
        path.write_text(path.read_text())          # the same text as an experiment
        check_experiment(load_experiment(path))
    except SpecError:
        pass


@FUZZ
@given(st.sampled_from(_paths(EXPERIMENT)), VALUES)
def test_experiment_with_one_key_replaced(tmp_path_factory, path: tuple, value: object) -> None:
    import yaml

    file = tmp_path_factory.mktemp("exp") / "exp.yaml"
    try:
        file.write_text(yaml.safe_dump(_replace(EXPERIMENT, path, value)))
    except (ValueError, yaml.YAMLError):
        return                                      # not representable as YAML at all
    try:
        load_experiment(file)
    except SpecError:
        pass
