"""Unit strings: decimal and binary prefixes mean what they say; bits are bits."""
import pytest
from hypothesis import given, strategies as st

from rapidllm.units import NOUN, UnitError, parse_quantity


@pytest.mark.parametrize("text,kind,expected", [
    ("80 GB", "bytes", 80e9), ("80 GiB", "bytes", 80 * 2**30), ("40 MiB", "bytes", 40 * 2**20),
    ("2.039 TB/s", "bandwidth", 2.039e12), ("200 Gb/s", "bandwidth", 25e9), ("450 GB/s", "bandwidth", 450e9),
    ("5 us", "time", 5e-6), ("1.2 ms", "time", 1.2e-3), ("1.41 GHz", "frequency", 1.41e9),
    ("312 TFLOP/s", "flops", 312e12), ("1e3 MB", "bytes", 1e9),
])
def test_parse(text: str, kind: str, expected: float) -> None:
    assert parse_quantity(text, kind) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text,kind", [("3.35 TB", "bandwidth"), ("5 GHz", "time"), ("80 GB/s", "bytes"),
                                       ("fast", "bandwidth"), ("10 furlongs", "bytes")])
def test_wrong_unit_names_the_kind(text: str, kind: str) -> None:
    with pytest.raises(UnitError, match=f"is not a {NOUN[kind]}; use a unit like"):   # "a byte count"
        parse_quantity(text, kind)


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
def test_binary_exceeds_decimal(x: float) -> None:
    assert parse_quantity(f"{x} GiB", "bytes") > parse_quantity(f"{x} GB", "bytes")


def test_maximum_per_kind() -> None:
    """The largest quantity of each kind parses and its text says what it is; just above it is refused, so
    a 1e30-second latency or 1e30 bytes of shared memory is bad input, not a 1e33-second step or a traceback."""
    from rapidllm.units import MAXIMUM, MAXIMUM_TEXT
    for kind, top in MAXIMUM.items():
        assert parse_quantity(MAXIMUM_TEXT[kind], kind) == top
        with pytest.raises(UnitError, match=f"is out of range; allowed: a {NOUN[kind]} .* and <= "):
            parse_quantity(top * 1.001, kind)
        with pytest.raises(UnitError, match="out of range"):
            parse_quantity(1e30, kind)
