"""Expansion fast paths (spec/named.py: validate_by_key, spec/case.py: shared sized fabrics): the same
verdicts, messages and case ids as validating and building every case from scratch."""
from __future__ import annotations

import pytest

from rapidllm.caches import Caches
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import validate_by_key
from rapidllm.spec.schema import schema_of, validate
from reference_impls import case_id_reference


def _error(fn, *args) -> str | None:
    try:
        fn(*args)
    except SpecError as err:
        return str(err)
    return None


def test_case_schema_is_judged_key_by_key() -> None:
    """The fast path applies to the case schema (if someone adds a rule relating two keys, it stops)."""
    s = schema_of("case")
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert set(s) <= {"$schema", "$id", "$comment", "title", "description", "type", "required", "properties",
                      "additionalProperties"}


def test_validate_by_key_gives_validate_verdicts(gpt_case) -> None:
    """Known-valid values never hide an error elsewhere in the mapping: bad values, unknown keys and
    missing keys give validate's own message, before and after the good values are remembered."""
    bad = [
        {**gpt_case, "parallelism": {**gpt_case["parallelism"], "tp": 0}},
        {**gpt_case, "workload": {**gpt_case["workload"], "mode": "serving"}},
        {**gpt_case, "precision": "int3"},
        {**gpt_case, "extra": 1},
        {k: v for k, v in gpt_case.items() if k != "workload"},
        {**gpt_case, "parallelism": {**gpt_case["parallelism"], "tp": True}},
        {**gpt_case, "clock": "fast"},
    ]
    with Caches().active():
        assert _error(validate_by_key, gpt_case, "case", "x") is None
        assert _error(validate_by_key, {**gpt_case, "clock": "1.2 GHz"}, "case", "x") is None
        for mapping in bad + bad:           # the second round runs with every good value remembered
            expect = _error(validate, mapping, "case", "x")
            assert expect is not None
            assert _error(validate_by_key, mapping, "case", "x") == expect
        assert _error(validate_by_key, None, "case", "x") == _error(validate, None, "case", "x")


def test_shared_fabrics_keep_case_ids(gpt_case) -> None:
    """Cases of several world sizes on one named-or-inline fabric, built in one scope: ids equal the
    asdict definition, and a fabric too small for a layout still says so."""
    with Caches().active():
        for dp in (1, 2, 4, 1):
            case = resolve_case({**gpt_case, "parallelism": {**gpt_case["parallelism"], "dp": dp}}, "x")
            assert case.case_id == case_id_reference(case)
            assert case.network.total_size >= case.parallelism.world
        small = {**gpt_case, "network": {"dimensions": [{"topology": "switch", "size": 8,
                                                          "link_bandwidth": "100 GB/s", "latency": "0 us"}]}}
        with pytest.raises(SpecError, match="holds 8 ranks"):
            resolve_case(small, "x")


def test_parallelism_judged_value_by_value(gpt_case, monkeypatch) -> None:
    """The parallelism mapping is judged one level down: a new combination of sizes that each passed is
    not validated again, while an unknown, mistyped or out-of-range value in it, or an unknown key, gets
    validate's own message even when every other value is remembered."""
    import rapidllm.spec.named as named

    par = gpt_case["parallelism"]
    assert {"dp", "tp", "pp"} <= set(par)
    calls = []
    monkeypatch.setattr(named, "validate", lambda *a: calls.append(a) or validate(*a))
    with Caches().active():
        for dp, pp in ((1, 1), (2, 2)):
            mapping = {**gpt_case, "parallelism": {**par, "dp": dp, "pp": pp}}
            assert _error(validate_by_key, mapping, "case", "x") is None
        assert _error(validate_by_key, {**gpt_case, "parallelism": {**par, "dp": 2, "pp": 1}}, "case", "x") is None
        assert _error(validate_by_key, {**gpt_case, "parallelism": {**par, "pp": 2, "dp": 1}}, "case", "x") is None
        assert [c for c in calls if c[1] == "case"] == []     # every value judged alone (`valid_alone`)
        for bad in ({**par, "dp": "2"}, {**par, "dp": 2.5}, {**par, "dp": 0}, {**par, "dpp": 2},
                    {**par, "recompute": "some"}, {**par, "dp": [2]}):
            mapping = {**gpt_case, "parallelism": bad}
            expect = _error(validate, mapping, "case", "x")
            assert expect is not None and _error(validate_by_key, mapping, "case", "x") == expect
        mapping = {**gpt_case, "parallelism": [par]}
        assert _error(validate_by_key, mapping, "case", "x") == _error(validate, mapping, "case", "x") is not None
        faults = {**gpt_case, "faults": [{"link": [0, 1], "bandwidth_factor": 0.5}]}     # a $ref: validated whole
        assert _error(validate_by_key, faults, "case", "x") is None and calls[-1][0] is faults


def test_valid_alone_agrees_with_validate(gpt_case) -> None:
    """A value judged alone against its subschema passes exactly when the mapping holding it passes."""
    from rapidllm.spec.schema import valid_alone

    par = gpt_case["parallelism"]
    for value in (1, 2, 0, -1, 2.5, "2", True, None, 131072, 131073):
        whole = _error(validate, {**gpt_case, "parallelism": {**par, "dp": value}}, "case", "x") is None
        assert valid_alone("case", ("parallelism", "dp"), value) == whole, value
    for value in ("selective", "full", "none", "some", 1):
        whole = _error(validate, {**gpt_case, "parallelism": {**par, "recompute": value}}, "case", "x") is None
        assert valid_alone("case", ("parallelism", "recompute"), value) == whole, value
    for workload in (gpt_case["workload"], {**gpt_case["workload"], "mode": "serving"},
                     {**gpt_case["workload"], "seq_len": 0}, {"mode": "training"}):
        whole = _error(validate, {**gpt_case, "workload": workload}, "case", "x") is None
        assert valid_alone("case", ("workload",), workload) == whole, workload
    assert not valid_alone("case", ("faults",), [])          # refers elsewhere: never judged alone
