"""Carry a recorded collective simulation (network/plan.py) to another fabric that looks the same to it.

A sweep sizes one network for every world size (64 to 512 GPUs of one SuperPOD design), and layouts of
different worlds share groups: the data-parallel groups of stage 0 are the same ranks for every pipeline
depth. Such a collective, on a larger fabric of the same design, crosses links of the same bandwidths and
latencies in the same pattern, only numbered differently, and the simulation would repeat itself.

What a plan's simulation read of its fabric (its `Footprint`):

- the coordinates of the groups' ranks (`hierarchical` splits a group by them; nothing else of the
  topology enters a schedule);
- the route of every unit (decompose.units: every ring position, every transfer of a plain schedule) of
  the whole collective, as route ids per unit, hops per route and the links of the routes, renumbered in
  order of first use: every decision of `decompose` (stages sharing no link, parts that are link-disjoint
  relabellings of each other) and every kernel input is a function of which units share which links;
- each used link's bandwidth and latency, in that order.

When two fabrics give equal footprints, numbering the links by first use is a bijection between the links
the collective uses on each that maps routes to routes and keeps every bandwidth and latency, so the
build, every decision and every kernel run are the same, float for float (the kernels order events by
time and transfer id, never by link id). `moved` checks this and rewrites the plan's route tables through
the bijection (and shares its answers, `Plan.results`: they are the same); anything else returns None and
the caller simulates as usual.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rapidllm.network.hierarchical import rank_coords
from rapidllm.network.plan import Plan, relinked
from rapidllm.network.routing import Router, route_table
from rapidllm.network.topology import Topology


@dataclass(frozen=True)
class Origin:
    """The fabric a plan was recorded (or moved) on, and the collective's ranks and units."""
    topo: Topology
    router: Router
    ranks: np.ndarray           # every rank of the groups
    src: np.ndarray             # source and destination rank of every unit (decompose.units)
    dst: np.ndarray


@dataclass(frozen=True)
class Footprint:
    """What the collective's simulation reads of a fabric (module docstring); `used`: the link ids in
    order of first use (not compared: it is the bijection)."""
    coords: np.ndarray
    route_of: np.ndarray
    route_ptr: np.ndarray
    canon: np.ndarray
    bw: np.ndarray
    lat: np.ndarray
    used: np.ndarray

    def same(self, other: Footprint) -> bool:
        return all(np.array_equal(a, b) for a, b in (
            (self.coords, other.coords), (self.route_of, other.route_of), (self.route_ptr, other.route_ptr),
            (self.canon, other.canon), (self.bw, other.bw), (self.lat, other.lat)))


def footprint(origin: Origin, link_bw: np.ndarray, link_lat: np.ndarray) -> Footprint:
    """The collective's footprint on `origin`'s fabric with these link bandwidths and latencies."""
    route_of, ptr, links = route_table(origin.router, origin.src, origin.dst)
    uniq, first, inv = np.unique(links, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    number = np.empty(len(uniq), np.int64)
    number[order] = np.arange(len(uniq))
    used = uniq[order].astype(np.int64)
    return Footprint(rank_coords(origin.topo, origin.ranks), route_of, ptr, number[inv.ravel()],
                     link_bw[used], link_lat[used], used)


def moved(plan: Plan, mine: Footprint, to: Origin, link_bw: np.ndarray, link_lat: np.ndarray) -> Plan | None:
    """`plan`, whose footprint on the fabric it was recorded on is `mine`, for the same collective on
    `to`'s fabric (bandwidths `link_bw`, latencies `link_lat`), or None when the footprints differ."""
    if plan.root is None:
        return None
    theirs = footprint(to, link_bw, link_lat)
    if not mine.same(theirs):
        return None
    mapping = np.full(len(plan.link_bw), -1, np.int64)
    mapping[mine.used] = theirs.used
    root = relinked(plan.root, mapping)
    return None if root is None else Plan(root, plan.transfers, link_bw, link_lat, plan.results)
