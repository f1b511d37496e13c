"""Unit strings -> SI floats.

Specs carry explicit units ("80 GB", "2.0 TB/s", "200 Gb/s", "5 us", "1.41 GHz", "312 TFLOP/s").
Decimal prefixes (k, M, G, T, P) are powers of 1000 and binary ones (Ki, Mi, Gi, Ti) powers of 1024, so
"80 GB" is 80e9 bytes and "80 GiB" is 80 * 2**30. Lower-case "b" means bits (network links are quoted
in Gb/s), upper-case "B" bytes. Everything returned is SI: bytes, bytes/s, seconds, Hz, FLOP/s.

Every quantity is finite, none is negative and none is absurdly large (MAXIMUM); rates (bandwidth,
frequency, FLOP/s) are also > 0, since a zero rate divides. This is the one check of a quantity's range,
shared by the spec schemas and the CLI's flags (docs/limits.md); keys that must be > 0 beyond that say
`positive: true` in their schema.
"""
from __future__ import annotations

import math
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

SI_UNIT = {"bytes": "bytes", "bandwidth": "bytes/s", "time": "seconds", "frequency": "Hz", "flops": "FLOP/s"}
NOUN = {"bytes": "byte count", "bandwidth": "bandwidth", "time": "time", "frequency": "frequency",
        "flops": "FLOP rate"}
# kinds whose zero would divide (a time at zero bandwidth, clock or FLOP rate): refused as well as negatives
RATE_KINDS = frozenset({"bandwidth", "frequency", "flops"})
# The largest quantity of each kind (docs/limits.md), 50x or more above the largest in config/ (183 GiB of
# HBM, 10 TB/s, 4.5 PFLOP/s, 2 GHz, latencies of microseconds; a day for an SLO or a measured time): a 1e30-
# second link latency or launch overhead gave a 1e33-second step, and 1e30 bytes of shared memory per SM
# overflowed the tile model's int64 occupancy into a traceback.
MAXIMUM = {"bytes": 2.0**50, "bandwidth": 1e15, "time": 86400.0, "frequency": 1e11, "flops": 1e18}
MAXIMUM_TEXT = {"bytes": "1 PiB", "bandwidth": "1 PB/s", "time": "24 h", "frequency": "100 GHz",
                "flops": "1 EFLOP/s"}

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
    return _in_range(_parse(value, kind), value, kind)


def _parse(value: object, kind: str) -> float:
    wrong = UnitError(f"{_short(value)} is not a {NOUN[kind]}; use a unit like {KIND_EXAMPLES[kind]}")
    if isinstance(value, bool):
        raise wrong
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str) or len(value) > 100:
        raise wrong
    match = _PATTERN.match(value)
    if not match:
        raise wrong
    unit = (match.group("unit") or "").strip()
    if not unit:
        return float(match.group("num"))
    parsed = _unit_scale(unit)
    if parsed is None or parsed[0] != kind:
        raise wrong
    return float(match.group("num")) * parsed[1]


def _in_range(si: float, value: object, kind: str) -> float:
    """The range every quantity of `kind` must be in: finite, >= 0 (> 0 for rates), at most MAXIMUM."""
    if not math.isfinite(si):
        raise UnitError(f"{_short(value)} is not a finite {NOUN[kind]}; use a unit like {KIND_EXAMPLES[kind]}")
    if si < 0 or (si == 0 and kind in RATE_KINDS) or si > MAXIMUM[kind]:
        bound = "> 0" if kind in RATE_KINDS else ">= 0"
        raise UnitError(f"{_short(value)} is out of range; allowed: a {NOUN[kind]} {bound} and <= {MAXIMUM_TEXT[kind]}")
    return si


def _short(value: object) -> str:
    """repr of a value for an error line, cut to 60 characters (a value may be a whole file)."""
    text = repr(value) if isinstance(value, (str, int, float)) else f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."

