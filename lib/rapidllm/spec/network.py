"""Network spec: ordered dimensions (innermost first), the axis order ranks are flattened in, faults."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rapidllm.spec.errors import SpecError
from rapidllm.units import parse_quantity as q

DEFAULT_AXIS_ORDER = ("tp", "cp", "ep", "dp", "pp")
# NCCL stages every transfer through fixed-size buffers (NCCL_BUFFSIZE, 4 MiB by default; NCCL environment
# variable documentation), so a collective moves in chunks of this size: see docs/network.md "Chunking".
DEFAULT_CHUNK_BYTES = 4 * 2**20
MAX_RANKS = 2**17                  # ranks of a fabric, as the case's world size (docs/limits.md)


@dataclass(frozen=True)
class FaultSpec:
    link: tuple[int, int]            # endpoints (global node ids; see docs/network.md)
    dimension: int | None = None
    bandwidth_factor: float = 1.0
    extra_latency_s: float = 0.0
    failed: bool = False

    @classmethod
    def from_mapping(cls, m: dict[str, Any]) -> "FaultSpec":
        return cls(link=(int(m["link"][0]), int(m["link"][1])), dimension=m.get("dimension"),
                   bandwidth_factor=float(m.get("bandwidth_factor", 1.0)),
                   extra_latency_s=q(m.get("extra_latency", 0.0), "time"), failed=bool(m.get("failed", False)))

    def text(self) -> str:
        """'[0, 2048] failed', '[0, 2304] bandwidth x0.5, +2 us latency (dimension 1)': the fault as a
        prediction's table, a sweep's `faults` column and `predict_many` show it, in the case file's terms,
        so a faulted output never reads like a healthy one (the case id alone does not say why it differs)."""
        what = ["failed"] if self.failed else []
        what += [f"bandwidth x{self.bandwidth_factor:g}"] if self.bandwidth_factor != 1.0 and not self.failed else []
        what += [f"+{self.extra_latency_s * 1e6:g} us latency"] if self.extra_latency_s and not self.failed else []
        where = f" (dimension {self.dimension})" if self.dimension is not None else ""
        return f"[{self.link[0]}, {self.link[1]}] {', '.join(what) or 'no change'}{where}"


def faults_text(faults: tuple[FaultSpec, ...]) -> str:
    """A network's faults as one string ('' for none): each `FaultSpec.text`, joined by '; '."""
    return "; ".join(f.text() for f in faults)


@dataclass(frozen=True)
class DimensionSpec:
    name: str
    topology: str
    size: int                        # 0 while 'auto' is unresolved
    link_bandwidth: float            # bytes/s per direction
    latency_s: float
    shape: tuple[int, ...] = ()
    leaf_size: int = 0
    spines: int = 0
    rail_optimized: bool = False
    # NVLink SHARP: a switch that reduces in the network (NCCL's NVLS all-reduce); None = it only forwards.
    # The value is the fixed setup latency (synchronization, multicast set-up) of one in-switch all-reduce.
    in_switch_reduction_s: float | None = None
    # Fixed start-up of every collective on this dimension before its first byte moves (NCCL's per-call
    # base latency; the per-link `latency` then counts per hop).
    collective_latency_s: float = 0.0


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    dimensions: tuple[DimensionSpec, ...]
    axis_order: tuple[str, ...] = DEFAULT_AXIS_ORDER
    utilization: float = 1.0
    faults: tuple[FaultSpec, ...] = field(default_factory=tuple)
    chunk_bytes: float = DEFAULT_CHUNK_BYTES

    def __hash__(self) -> int:
        """The hash of the fields' tuple (as the generated one), kept on the instance after the first call:
        a sweep keys ~25,000 memo lookups by the network, and each walked every dimension (~35 ms per
        sweep-1000). Not pickled (`__getstate__`): a string's hash differs between processes."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def total_size(self) -> int:
        return math.prod(d.size for d in self.dimensions)

    def sized_for(self, world: int, source: str) -> "NetworkSpec":
        """Resolve an 'auto' outermost dimension so the fabric holds exactly `world` ranks (or more)."""
        dims = list(self.dimensions)
        inner = math.prod(d.size for d in dims if d.size)
        if dims[-1].size == 0:
            size = max(1, -(-world // inner))
            dims[-1] = replace(dims[-1], size=size, shape=dims[-1].shape or ())
        net = replace(self, dimensions=tuple(dims))
        if net.total_size < world:
            raise SpecError.at(source, "network", f"network {self.name!r} holds {net.total_size} ranks but the "
                               f"parallel layout needs {world}")
        return net

    @classmethod
    def from_mapping(cls, m: dict[str, Any], source: str) -> "NetworkSpec":
        dims = []
        for i, d in enumerate(m["dimensions"]):
            auto = d["size"] == "auto"
            if auto and i != len(m["dimensions"]) - 1:
                raise SpecError.at(source, f"dimensions.{i}.size", "'auto' is allowed only on the outermost dimension")
            shape = tuple(d.get("shape", ()))
            if shape and not auto and math.prod(shape) != d["size"]:
                raise SpecError.at(source, f"dimensions.{i}.shape", f"product of {list(shape)} is not size {d['size']}")
            reduction = d.get("in_switch_reduction")
            if reduction is not None and d["topology"] != "switch":
                raise SpecError.at(source, f"dimensions.{i}.in_switch_reduction",
                                   f"only a switch dimension reduces in the network, not {d['topology']!r}")
            dims.append(DimensionSpec(
                name=d.get("name", f"dim{i}"), topology=d["topology"], size=0 if auto else d["size"],
                link_bandwidth=q(d["link_bandwidth"], "bandwidth"), latency_s=q(d["latency"], "time"),
                shape=shape, leaf_size=d.get("leaf_size", 0), spines=d.get("spines", 0),
                rail_optimized=d.get("rail_optimized", False),
                in_switch_reduction_s=None if reduction is None else q(reduction, "time"),
                collective_latency_s=q(d.get("collective_latency", 0.0), "time")))
        fixed = math.prod(d.size for d in dims if d.size)
        if fixed > MAX_RANKS:
            raise SpecError.at(source, "dimensions",
                               f"the sizes multiply to {fixed} ranks; allowed: at most {MAX_RANKS}")
        order = tuple(m.get("axis_order", DEFAULT_AXIS_ORDER))
        order = order + tuple(a for a in DEFAULT_AXIS_ORDER if a not in order)
        return cls(name=m["name"], dimensions=tuple(dims), axis_order=order,
                   utilization=float(m.get("utilization", 1.0)),
                   faults=tuple(FaultSpec.from_mapping(f) for f in m.get("faults", [])),
                   chunk_bytes=q(m.get("chunk_size", DEFAULT_CHUNK_BYTES), "bytes"))


DIRECT_TOPOLOGIES = ("ring", "fully_connected", "mesh", "torus", "kingmesh")


def grid_shape(dim: DimensionSpec) -> tuple[int, ...]:
    """Extents of a mesh/torus/kingmesh dimension (innermost axis first); kingmesh defaults to ~square 2-D."""
    return _shape(dim.topology, dim.size, dim.shape)


def _shape(topology: str, size: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    if shape:
        return tuple(shape)
    if topology == "kingmesh":
        a = int(math.isqrt(size))
        while size % a:
            a -= 1
        return (size // a, a)
    return (size,)


def grid_offsets(topology: str, ndim: int) -> list[tuple[int, ...]]:
    """Neighbour offsets with a positive leading non-zero entry (each cable listed once)."""
    if topology == "kingmesh":
        offs = [o for o in itertools.product((-1, 0, 1), repeat=ndim) if any(o)]
        return [o for o in offs if next(x for x in o if x) > 0]
    return [tuple(1 if i == a else 0 for i in range(ndim)) for a in range(ndim)]


def _unflatten(i: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for s in shape:
        out.append(i % s)
        i //= s
    return out


def _flatten(c: list[int], shape: tuple[int, ...]) -> int:
    i, stride = 0, 1
    for ci, s in zip(c, shape):
        i += ci * stride
        stride *= s
    return i


DEFAULT_LEAF_PORTS = 32


@dataclass(frozen=True)
class FatTreePlan:
    """How a fat-tree dimension of `size` ranks per line and `lines` lines is cut into switches: the
    topology builder (network/topology.py `_build_fat_tree`) builds from it and `rank_uplinks` numbers
    leaves with it, so the two cannot disagree. rail: every line has its own leaves (rail_optimized, or a
    single line), else leaves are shared by all lines; per_leaf: ranks of one line on one leaf (a shared
    leaf takes leaf_size // lines of each line); leaves: leaves per line (rail) or in all; spines: default
    one per leaf, none with a single leaf."""
    rail: bool
    per_leaf: int
    leaves: int
    spines: int

    @classmethod
    def of(cls, dim: "DimensionSpec", lines: int) -> "FatTreePlan":
        n = dim.size
        rail = dim.rail_optimized or lines == 1
        ports = dim.leaf_size or DEFAULT_LEAF_PORTS
        per_leaf = min(n, ports) if rail else max(1, min(n, ports // lines))
        leaves = -(-n // per_leaf)
        return cls(rail, per_leaf, leaves, dim.spines or (leaves if leaves > 1 else 0))


def switch_count(dim: "DimensionSpec", lines: int) -> int:
    """Switch nodes a dimension adds to the fabric (node ids follow the ranks, dimension by dimension):
    one per line for a switch, leaves (per rail when rail-optimized) and spines for a fat tree, none for a
    direct-connect topology."""
    if dim.topology == "switch":
        return lines
    if dim.topology == "fat_tree":
        plan = FatTreePlan.of(dim, lines)
        return plan.leaves * (lines if plan.rail else 1) + plan.spines
    return 0


def rank_uplinks(net: "NetworkSpec", d: int) -> list[tuple[int, int]]:
    """[rank, switch] of every rank of the first line of switched dimension d (the line holding rank 0):
    each rank's own cable into the dimension's switch (`switch`) or its leaf (`fat_tree`), as global node
    ids of the sized fabric (docs/network.md "Node ids"). [] for a direct-connect dimension. What a
    `fault_sweep` places one fault at a time on (spec/experiment.py); the ids match `build_topology`'s
    (tests/test_network_topology.py)."""
    sizes = [dim.size for dim in net.dimensions]
    n_ranks = math.prod(sizes)
    base = n_ranks + sum(switch_count(dim, n_ranks // dim.size) for dim in net.dimensions[:d])
    dim, stride = net.dimensions[d], math.prod(sizes[:d])
    if dim.topology == "switch":
        return [(k * stride, base) for k in range(dim.size)]
    if dim.topology == "fat_tree":       # line 0's leaves come first whether or not they are per rail
        per_leaf = FatTreePlan.of(dim, n_ranks // dim.size).per_leaf
        return [(k * stride, base + k // per_leaf) for k in range(dim.size)]
    return []


def line_cables(topology: str, size: int, shape: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """The cables of one line of a direct-connect dimension, as position pairs (i, j) along the line, in
    the order the topology builder numbers them (so link ids, and with them routing ties, are fixed).

    Here in the spec layer so that an experiment can place a fault on every cable in turn
    (spec/experiment.py `fault_sweep`) without building the fabric; a switch or fat tree has none.
    """
    if topology == "ring":
        return [(i, (i + 1) % size) for i in range(size if size > 2 else size - 1)]
    if topology == "fully_connected":
        return list(itertools.combinations(range(size), 2))
    if topology not in ("mesh", "torus", "kingmesh"):
        return []
    extents = _shape(topology, size, shape)
    if math.prod(extents) != size:
        raise SpecError(f"shape {list(extents)} does not multiply to size {size}")
    edges: set[tuple[int, int]] = set()
    for i in range(size):
        c = _unflatten(i, extents)
        for off in grid_offsets(topology, len(extents)):
            n = []
            for a, (ca, oa) in enumerate(zip(c, off)):
                v = ca + oa
                if topology == "torus" and extents[a] > 2:
                    v %= extents[a]
                n.append(v)
            if all(0 <= v < s for v, s in zip(n, extents)):
                j = _flatten(n, extents)
                if j != i:
                    edges.add((min(i, j), max(i, j)))
    return sorted(edges)
