"""Operating cost of one GPU in service: energy at the wall plus capital spread over its life, in $/hour.

    $/GPU-hour = board power x power utilisation x PUE x energy price  +  capital / (lifetime in hours)

Board power is the datasheet TDP; power utilisation the mean draw as a fraction of it; PUE (power usage
effectiveness) scales IT power to facility power (cooling, conversion). Capital is what one GPU costs to buy
(not the chip's manufacturing cost, which is `package_cost`), on the basis its inputs state: the GPU alone,
or a system's list price over its GPUs (host, NICs and chassis included). $/GPU-hours of two devices compare
only on one basis, so the basis travels with the number. A rental rate of the user's own (a cloud price)
replaces energy + capital altogether.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

HOURS_PER_YEAR = 365.25 * 24.0
# `capital_basis` values of a cost section (workflow/schemas/cost.schema.yaml), as the output explains them.
CAPITAL_BASES = {"gpu": "the GPU's price alone",
                 "system_share": "a system's list price / its GPUs: host, NICs and chassis included"}
# Every `Operating.basis`, explained where `predict --cost` prints it.
BASES = {**CAPITAL_BASES, "rental": "the rental rate given, energy and capital included",
         "unstated": "the cost inputs do not say what capital_usd covers"}

# What a $/GPU-hour on each capital basis leaves out of running a GPU in a cluster, for the caveat printed
# beside a figure priced without a rental rate (user trial 3: $0.909/GPU-hour read as the H100's cost, 2.7x
# below a $2.49 rental of the same run).
# (what the capital is, what is left out) per basis
LEFT_OUT = {"gpu": ("the GPU's price", "servers, network and facility"),
            "system_share": ("a server's price share", "network and facility")}


@dataclass(frozen=True)
class Operating:
    board_power_w: float
    power_utilization: float
    pue: float
    energy_usd_per_kwh: float
    capital_usd: float
    lifetime_years: float
    capital_basis: str = ""                     # a key of CAPITAL_BASES; "" when the inputs do not say
    rental_usd_per_gpu_hour: float = math.nan   # a user's rate replacing energy + capital (`rented`)

    @classmethod
    def rental_only(cls, usd_per_gpu_hour: float) -> "Operating":
        """A device without cost inputs priced at a rental rate alone: nothing else is known (NaN)."""
        nan = math.nan
        return cls(nan, nan, nan, nan, nan, nan, rental_usd_per_gpu_hour=usd_per_gpu_hour)

    def rented(self, usd_per_gpu_hour: float) -> "Operating":
        """The same GPU at a rate of the user's own. A rent's parts are unknown, so energy and capital per
        hour are NaN; board power and utilisation stay (tokens per watt)."""
        return replace(self, rental_usd_per_gpu_hour=usd_per_gpu_hour)

    @property
    def is_rented(self) -> bool:
        return not math.isnan(self.rental_usd_per_gpu_hour)

    @property
    def basis(self) -> str:
        """What $/GPU-hour rests on: "rental", or the capital basis ("unstated" when the inputs do not say)."""
        return "rental" if self.is_rented else (self.capital_basis or "unstated")

    def basis_note(self, rate_hint: str) -> str | None:
        """One line for beside a $ figure priced on energy + capital (None for a rental rate): what the
        capital covers and leaves out, so a reader does not take it for a rental or full-TCO rate, and how to
        price at one (`rate_hint`, the flag or key that gives a rate)."""
        if self.is_rented:
            return None
        if self.basis not in LEFT_OUT:
            return (f"cost_basis {self.basis}: the cost inputs do not say what capital_usd covers; {rate_hint} "
                    "prices at a rate of your own")
        capital, left_out = LEFT_OUT[self.basis]
        return (f"{capital} over {self.lifetime_years:g} years + energy only, without {left_out}: below a rental "
                f"or full-TCO $/GPU-hour; {rate_hint} prices at one")

    @property
    def wall_power_w(self) -> float:
        """Mean facility power one GPU draws: board power x utilisation x PUE."""
        return self.board_power_w * self.power_utilization * self.pue

    @property
    def energy_usd_per_hour(self) -> float:
        return math.nan if self.is_rented else self.wall_power_w / 1000.0 * self.energy_usd_per_kwh

    @property
    def capital_usd_per_hour(self) -> float:
        return math.nan if self.is_rented else self.capital_usd / (self.lifetime_years * HOURS_PER_YEAR)

    @property
    def capital_per_gpu_usd(self) -> float:
        """The purchase price per GPU the per-capital ratio divides by; NaN for a rented GPU."""
        return math.nan if self.is_rented else self.capital_usd

    @property
    def usd_per_gpu_hour(self) -> float:
        if self.is_rented:
            return self.rental_usd_per_gpu_hour
        return self.energy_usd_per_hour + self.capital_usd_per_hour
