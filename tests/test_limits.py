"""The limits of docs/limits.md: the doc lists every schema bound with its value, inputs at the bounds give
sane answers (so the bounds are not too loose), and the checks that replaced slow or unsafe code give the
same results as before where the input is valid."""
from __future__ import annotations

import itertools
import json
import math

import pytest
import yaml

from conftest import ROOT
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import factorizations
from rapidllm.spec.schema import load_yaml
from rapidllm.units import UnitError, parse_quantity

LIMITS = (ROOT / "docs" / "limits.md").read_text()


def _maxima(node: object, path: list[str], out: list[tuple[str, int]]) -> None:
    """(dotted key, bound) of every maximum / maxItems in a schema, list items and $defs included."""
    if not isinstance(node, dict):
        return
    for key in ("maximum", "maxItems"):
        if isinstance(node.get(key), (int, float)) and node[key] > 2:      # fractions <= 1 and pairs are structural
            out.append((".".join(path), int(node[key])))
    for name, sub in {**node.get("properties", {}), **node.get("$defs", {})}.items():
        _maxima(sub, path + [name], out)
    for sub in node.get("oneOf", []) + node.get("anyOf", []):
        _maxima(sub, path, out)
    if isinstance(node.get("items"), dict):
        _maxima(node["items"], path, out)
    if isinstance(node.get("additionalProperties"), dict):
        _maxima(node["additionalProperties"], path + ["*"], out)
    for sub in node.get("patternProperties", {}).values():
        _maxima(sub, path + ["*"], out)


@pytest.mark.parametrize("schema", sorted(p.name for p in (ROOT / "workflow" / "schemas").glob("*.schema.yaml")))
def test_every_schema_bound_is_documented(schema: str) -> None:
    found: list[tuple[str, int]] = []
    _maxima(yaml.safe_load((ROOT / "workflow" / "schemas" / schema).read_text()), [], found)
    rows = [line for line in LIMITS.splitlines() if line.startswith("|")]
    for key, bound in found:
        assert any(f"`{key}`" in r and str(bound) in r for r in rows), f"{schema}: {key} <= {bound} not in docs/limits.md"


def test_quantities_finite_and_non_negative() -> None:
    assert parse_quantity("0 B", "bytes") == 0.0 and parse_quantity("0 us", "time") == 0.0
    assert parse_quantity("1 GiB", "bytes") == 2.0**30
    for value, kind in (("-1 GB", "bytes"), ("0 GB/s", "bandwidth"), ("0 Hz", "frequency"), ("1e400 B", "bytes"),
                        (math.nan, "time"), (math.inf, "flops"), ("-0.5 ms", "time"), (-1, "bytes")):
        with pytest.raises(UnitError):
            parse_quantity(value, kind)


def test_gemm_at_its_bounds_is_finite_and_below_peak() -> None:
    """m = n = k = 2^24, batch 2^16 (the gemm schema's maxima): the tile model neither overflows nor beats peak."""
    from rapidllm.cli.gemm import price_one
    from rapidllm.spec.hardware import HardwareSpec
    from rapidllm.spec.named import resolve_named

    hw = HardwareSpec.from_mapping(*resolve_named("hardware", "h100-sxm5-80gb", "t", "hardware"))
    for m, n, k, b in ((2**24, 2**24, 2**24, 2**16), (1, 2**24, 1, 2**16), (2**24, 1, 2**24, 1)):
        r = price_one(hw, m, n, k, "bf16", b)
        assert math.isfinite(r["time_s"]) and r["time_s"] > 0
        assert r["flops"] == pytest.approx(2.0 * m * n * k * b)
        assert r["achieved_flops_per_s"] <= hw.peak_flops("bf16") * (1 + 1e-9)


def _factorizations_by_enumeration(gpus: int, axes: tuple[str, ...], bounds: dict) -> list[dict]:
    """The enumeration factorizations() replaced: every divisor tuple, filtered by product (O(d^axes))."""
    factor_axes = [a for a in axes if a != "ep"]
    divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
    out = []
    for combo in itertools.product(divisors, repeat=len(factor_axes)):
        if math.prod(combo) != gpus:
            continue
        sizes = dict(zip(factor_axes, combo))
        if all(bounds.get(a, [1, gpus])[0] <= v <= bounds.get(a, [1, gpus])[1] for a, v in sizes.items()):
            if "ep" in axes:
                lo, hi = bounds.get("ep", [1, gpus])
                out += [{**sizes, "ep": ep} for ep in divisors if lo <= ep <= hi]
            else:
                out.append(sizes)
    return out


@pytest.mark.parametrize("gpus", [1, 7, 12, 64, 360, 512])
@pytest.mark.parametrize("axes,bounds", [(("dp", "tp", "pp"), {}), (("dp", "tp", "pp", "cp", "ep"), {"tp": [2, 8]}),
                                         (("tp", "dp"), {"dp": [1, 4], "ep": [1, 2]})])
def test_factorizations_same_as_enumeration(gpus: int, axes: tuple, bounds: dict) -> None:
    assert list(factorizations(gpus, axes, bounds)) == _factorizations_by_enumeration(gpus, axes, bounds)


def test_yaml_merge_keys_are_not_duplicates(tmp_path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("base: &b {tp: 2, pp: 2}\nother:\n  <<: *b\n  tp: 4\n")
    assert load_yaml(path)["other"] == {"tp": 4, "pp": 2}
    path.write_text("other:\n  tp: 2\n  tp: 4\n")
    with pytest.raises(SpecError, match="line 3: not valid YAML: duplicate key 'tp'"):
        load_yaml(path)


def test_world_bound_is_inclusive(gpt_case) -> None:
    """dp x tp x pp x cp = 2^17 GPUs is allowed (it resolves), 2^18 is not."""
    from rapidllm.spec.case import MAX_WORLD, resolve_case

    case = {**gpt_case, "model": "llama2-7b", "parallelism": {"tp": 8, "dp": MAX_WORLD // 8},
            "workload": {"mode": "training", "seq_len": 4096, "global_batch": MAX_WORLD // 8}}
    assert resolve_case(case, "x.yaml").parallelism.world == MAX_WORLD
    case["parallelism"]["dp"] *= 2
    case["workload"]["global_batch"] *= 2
    with pytest.raises(SpecError, match="parallelism: dp x tp x pp x cp = 262144 GPUs; allowed: at most 131072"):
        resolve_case(case, "x.yaml")


def test_collective_json_is_strict_json(capsys) -> None:
    """One rank moves nothing in no time: bandwidths are undefined and print as null, never Infinity."""
    from rapidllm.cli import main

    assert main(["collective", "--network", "dgx-a100", "--bytes", "1 GiB", "--ranks", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert out["time_s"] == 0.0 and out["algbw_bytes_per_s"] is None and out["busbw_bytes_per_s"] is None
