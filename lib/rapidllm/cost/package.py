"""Hierarchical package cost: dies, HBM stacks, silicon interposer, organic substrate, assembly and NRE.

After Graening et al. (DAC 2023, EPTC 2024): each part is bought or made at its own yield, then assembled;
an assembly that fails scraps every part in it, so

    package = (sum of parts + assembly) / assembly yield,
    assembly yield = prod over attaches (bond yield) x prod over dies (P(good | passed known-good-die test)),
    unit cost = package + NRE / volume.

HBM stacks are purchased known-good stacks (no escape term); the interposer is made like a die on its own
(older, cheaper) process and tested; the substrate is priced per mm2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rapidllm.cost.silicon import DieCost, Process, die_cost


@dataclass(frozen=True)
class Die:
    """count identical dies of one design (a monolithic GPU is one die; a split design several)."""
    name: str
    area_mm2: float
    process: Process
    count: int = 1


@dataclass(frozen=True)
class Hbm:
    """HBM sites on the interposer: `stacks` bought stacks, the other sites take structural dummies."""
    sites: int
    stacks: int
    price_per_stack_usd: float
    dummy_price_usd: float
    footprint_mm2: float


@dataclass(frozen=True)
class PackageSpec:
    dies: tuple[Die, ...]
    hbm: Hbm
    interposer_process: Process
    interposer_area_overhead: float    # interposer area / (die + HBM footprints): routing, spacing, rings
    substrate_area_scale: float        # substrate area / interposer area
    substrate_usd_per_mm2: float
    attach_usd: float                  # one die / stack bonded to the interposer (or interposer to substrate)
    attach_yield: float                # per microbump attach of a die or stack
    substrate_attach_yield: float      # the interposer onto the substrate
    package_test_usd: float
    package_nre_usd: float             # interposer masks, substrate and package design
    volume_units: float                # units the NRE is amortised over

    @property
    def interposer_area_mm2(self) -> float:
        parts = sum(d.area_mm2 * d.count for d in self.dies) + self.hbm.sites * self.hbm.footprint_mm2
        return self.interposer_area_overhead * parts

    @property
    def attaches(self) -> int:
        """Parts bonded to the interposer: every die and every HBM site (dummies are bonded too)."""
        return sum(d.count for d in self.dies) + self.hbm.sites

    def with_hbm_stacks(self, stacks: int, sites: int | None = None) -> "PackageSpec":
        """The same package with another HBM configuration (the interposer grows with the sites)."""
        return replace(self, hbm=replace(self.hbm, stacks=stacks, sites=max(stacks, sites or stacks)))


@dataclass(frozen=True)
class CostBreakdown:
    """Per-unit manufacturing cost in USD and the yields behind it."""
    dies_usd: float                    # tested dies, all of them
    hbm_usd: float
    interposer_usd: float
    substrate_usd: float
    assembly_usd: float                # bonding and final test
    assembly_yield: float
    package_usd: float                 # (parts + assembly) / assembly yield
    nre_per_unit_usd: float
    unit_usd: float                    # package + NRE per unit
    die_costs: tuple[DieCost, ...]
    interposer: DieCost

    @property
    def parts_usd(self) -> float:
        return self.dies_usd + self.hbm_usd + self.interposer_usd + self.substrate_usd

    @property
    def yield_loss_usd(self) -> float:
        """What assembly failures add: package cost minus what a perfect assembly would cost."""
        return self.package_usd - self.parts_usd - self.assembly_usd


def package_cost(spec: PackageSpec) -> CostBreakdown:
    """Manufacturing cost of one package (see the module docstring for the formula)."""
    dies = tuple(die_cost(d.area_mm2, d.process) for d in spec.dies)
    counts = [d.count for d in spec.dies]
    interposer = die_cost(spec.interposer_area_mm2, spec.interposer_process)
    hbm = spec.hbm.stacks * spec.hbm.price_per_stack_usd + (spec.hbm.sites - spec.hbm.stacks) * spec.hbm.dummy_price_usd
    substrate = spec.substrate_area_scale * spec.interposer_area_mm2 * spec.substrate_usd_per_mm2
    assembly = (spec.attaches + 1) * spec.attach_usd + spec.package_test_usd
    dies_usd = sum(c.usd * n for c, n in zip(dies, counts))
    y = (spec.attach_yield ** spec.attaches * spec.substrate_attach_yield * interposer.escape_yield
         * math.prod(c.escape_yield ** n for c, n in zip(dies, counts)))
    package = (dies_usd + hbm + interposer.usd + substrate + assembly) / y
    nre = (sum(d.process.design_nre_usd for d in spec.dies) + spec.package_nre_usd) / spec.volume_units
    return CostBreakdown(dies_usd=dies_usd, hbm_usd=hbm, interposer_usd=interposer.usd, substrate_usd=substrate,
                         assembly_usd=assembly, assembly_yield=y, package_usd=package, nre_per_unit_usd=nre,
                         unit_usd=package + nre, die_costs=dies, interposer=interposer)


def split_die(spec: PackageSpec, chiplets: int, d2d_overhead: float) -> PackageSpec:
    """The package with each die design cut into `chiplets` equal chiplets, each grown by `d2d_overhead`
    (fraction of its area) for die-to-die interfaces. NRE counts one design per original die, as the
    chiplets of one die are copies of one design."""
    if chiplets < 1:
        raise ValueError(f"chiplets must be >= 1, got {chiplets}")
    if chiplets == 1:
        return spec
    dies = tuple(replace(d, area_mm2=d.area_mm2 / chiplets * (1.0 + d2d_overhead), count=d.count * chiplets)
                 for d in spec.dies)
    return replace(spec, dies=dies)
