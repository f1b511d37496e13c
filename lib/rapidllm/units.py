"""Unit strings -> SI floats.

Specs carry explicit units ("80 GB", "2.0 TB/s", "200 Gb/s", "5 us", "1.41 GHz", "312 TFLOP/s").
Decimal prefixes (k, M, G, T, P) are powers of 1000 and binary ones (Ki, Mi, Gi, Ti) powers of 1024, so
"80 GB" is 80e9 bytes and "80 GiB" is 80 * 2**30. Lower-case "b" means bits (network links are quoted
in Gb/s), upper-case "B" bytes. Everything returned is SI: bytes, bytes/s, seconds, Hz, FLOP/s.
"""
from __future__ import annotations

import re

DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

KIND_EXAMPLES = {
    "bytes": "'80 GB', '40 MiB'",
    "bandwidth": "'2.0 TB/s', '450 GB/s', '200 Gb/s'",
    "time": "'5 us', '1.2 ms'",
    "frequency": "'1.41 GHz', '1410 MHz'",
    "flops": "'312 TFLOP/s'",
}

_NUMBER = r"(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_PATTERN = re.compile(r"^\s*" + _NUMBER + r"\s*(?P<unit>\S.*?)?\s*$")


class UnitError(ValueError):
    """A quantity that does not parse as the kind the key needs; the message says what is allowed."""


def _prefix(text: str) -> float | None:
    if text in BINARY:
        return BINARY[text]
    if text in DECIMAL:
        return DECIMAL[text]
    return None


def _unit_scale(unit: str) -> tuple[str, float] | None:
    """Return (kind, scale) for a unit string such as 'GiB', 'Gb/s', 'TFLOP/s', 'us'."""
    if unit in TIME:
        return "time", TIME[unit]
    if unit.endswith("Hz"):
        p = _prefix(unit[:-2])
        return ("frequency", p) if p is not None else None
    for suffix in ("FLOP/s", "FLOPS", "flop/s"):
        if unit.endswith(suffix):
            p = _prefix(unit[: -len(suffix)])
            return ("flops", p) if p is not None else None
    for suffix, bits in (("B/s", 1.0), ("Bps", 1.0), ("b/s", 0.125), ("bps", 0.125)):
        if unit.endswith(suffix):
            p = _prefix(unit[: -len(suffix)])
            return ("bandwidth", p * bits) if p is not None else None
    if unit.endswith("B"):
        p = _prefix(unit[:-1])
        return ("bytes", p) if p is not None else None
    return None


def parse_quantity(value: object, kind: str) -> float:
    """Parse `value` as a quantity of `kind` and return it in SI units.

    Bare numbers are accepted and read as already SI (bytes, bytes/s, s, Hz, FLOP/s) so computed
    specs can round-trip; strings must carry a unit of the right kind.
    """
    if isinstance(value, bool):
        raise UnitError(f"{value!r} is not a {kind}; use a unit like {KIND_EXAMPLES[kind]}")
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise UnitError(f"{value!r} is not a {kind}; use a unit like {KIND_EXAMPLES[kind]}")
    match = _PATTERN.match(value)
    if not match:
        raise UnitError(f"{value!r} is not a {kind}; use a unit like {KIND_EXAMPLES[kind]}")
    unit = (match.group("unit") or "").strip()
    if not unit:
        return float(match.group("num"))
    parsed = _unit_scale(unit)
    if parsed is None or parsed[0] != kind:
        raise UnitError(f"{value!r} is not a {kind}; use a unit like {KIND_EXAMPLES[kind]}")
    return float(match.group("num")) * parsed[1]

