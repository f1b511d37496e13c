"""Wafer-level closed forms: dies per wafer, defect-limited die yield, cost of a tested good die.

These are the textbook formulas the hierarchical chiplet cost model (Graening et al., DAC 2023 "Chiplets:
how small is too small?"; EPTC 2024) builds on; they are kept apart from the package assembly so that the
tests can check each one against hand-computed values (Hennessy & Patterson, Computer Architecture: A
Quantitative Approach, 4th/5th ed., ch. 1 "Cost of an Integrated Circuit").
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Process:
    """One wafer process (config/process/*.yaml): what a wafer costs and how many defects it carries."""
    name: str
    wafer_diameter_mm: float
    edge_exclusion_mm: float
    scribe_mm: float                   # dicing street added to each die edge
    wafer_cost_usd: float
    defect_density_per_cm2: float
    clustering_alpha: float            # negative-binomial clustering parameter (large = random defects)
    test_cost_usd: float               # known-good-die (wafer sort) test, per die tested
    test_coverage: float               # fraction of defective dies the test catches
    design_nre_usd: float              # design + mask set of one die design in this process


def dies_per_wafer(die_area_mm2: float, wafer_diameter_mm: float, edge_exclusion_mm: float = 0.0,
                   scribe_mm: float = 0.0) -> float:
    """Gross dies per wafer: usable-disc area over die area minus the partial dies lost along the rim,

        DPW = pi (d/2)^2 / A  -  pi d / sqrt(2 A),   d = diameter - 2 x edge exclusion,

    with A the die area grown by the scribe street on each side (a square die assumed for the street).
    Not rounded: callers floor it when whole dies matter (see `good_dies_per_wafer`)."""
    if die_area_mm2 <= 0:
        raise ValueError(f"die area must be positive, got {die_area_mm2}")
    side = math.sqrt(die_area_mm2) + scribe_mm
    area = side * side
    d = wafer_diameter_mm - 2.0 * edge_exclusion_mm
    return max(math.pi * (d / 2.0) ** 2 / area - math.pi * d / math.sqrt(2.0 * area), 0.0)


def die_yield(die_area_mm2: float, defect_density_per_cm2: float, alpha: float = math.inf) -> float:
    """Negative-binomial (clustered-defect) die yield, Y = (1 + A D0 / alpha)^-alpha (Stapper 1983).

    alpha -> infinity is the Poisson limit exp(-A D0) (defects uniformly random); small alpha means strong
    clustering (defects bunch on few dies, so more dies escape); D0 = 0 gives Y = 1."""
    ad = die_area_mm2 / 100.0 * defect_density_per_cm2
    if math.isinf(alpha):
        return math.exp(-ad)
    return (1.0 + ad / alpha) ** (-alpha)


def passed_fraction(y: float, coverage: float) -> float:
    """Fraction of dies that pass known-good-die test: the good ones plus the bad ones it misses."""
    return y + (1.0 - y) * (1.0 - coverage)


def escape_yield(y: float, coverage: float) -> float:
    """Probability a die that passed test is actually good (test escapes are caught only after assembly)."""
    return y / passed_fraction(y, coverage)


@dataclass(frozen=True)
class DieCost:
    """Cost of one die that passed known-good-die test, and what went into it."""
    area_mm2: float
    dies_per_wafer: float
    die_yield: float
    escape_yield: float                # P(good | passed test): enters the package's assembly yield
    raw_usd: float                     # wafer cost / dies per wafer
    test_usd: float
    usd: float                         # (raw + test) / passed fraction


def die_cost(area_mm2: float, process: Process) -> DieCost:
    """Cost of a tested die: every candidate die costs wafer/DPW and one test; only the passed fraction is
    sold on, so cost per passed die = (wafer cost / DPW + test) / passed fraction. With full test coverage
    this is the issue's "wafer cost / good dies + test" with the test of the failed dies charged too.
    Whole dies only (DPW floored): a die larger than the usable wafer raises ValueError."""
    dpw = math.floor(dies_per_wafer(area_mm2, process.wafer_diameter_mm, process.edge_exclusion_mm,
                                    process.scribe_mm))
    if dpw < 1:
        raise ValueError(f"a {area_mm2:g} mm2 die does not fit on a {process.wafer_diameter_mm:g} mm wafer "
                         f"({process.name})")
    y = die_yield(area_mm2, process.defect_density_per_cm2, process.clustering_alpha)
    raw = process.wafer_cost_usd / dpw
    passed = passed_fraction(y, process.test_coverage)
    return DieCost(area_mm2=area_mm2, dies_per_wafer=dpw, die_yield=y,
                   escape_yield=escape_yield(y, process.test_coverage), raw_usd=raw,
                   test_usd=process.test_cost_usd, usd=(raw + process.test_cost_usd) / passed)
