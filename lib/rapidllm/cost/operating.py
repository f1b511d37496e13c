"""Operating cost of one GPU in service: energy at the wall plus capital spread over its life, in $/hour.

    $/GPU-hour = board power x power utilisation x PUE x energy price  +  capital / (lifetime in hours)

Board power is the datasheet TDP; power utilisation the mean draw as a fraction of it; PUE (power usage
effectiveness) scales IT power to facility power (cooling, conversion). Capital is what one GPU's share of
the installed system cost (not the chip's manufacturing cost, which is `package_cost`).
"""
from __future__ import annotations

from dataclasses import dataclass

HOURS_PER_YEAR = 365.25 * 24.0


@dataclass(frozen=True)
class Operating:
    board_power_w: float
    power_utilization: float
    pue: float
    energy_usd_per_kwh: float
    capital_usd: float
    lifetime_years: float

    @property
    def wall_power_w(self) -> float:
        """Mean facility power one GPU draws: board power x utilisation x PUE."""
        return self.board_power_w * self.power_utilization * self.pue

    @property
    def energy_usd_per_hour(self) -> float:
        return self.wall_power_w / 1000.0 * self.energy_usd_per_kwh

    @property
    def capital_usd_per_hour(self) -> float:
        return self.capital_usd / (self.lifetime_years * HOURS_PER_YEAR)

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.energy_usd_per_hour + self.capital_usd_per_hour
