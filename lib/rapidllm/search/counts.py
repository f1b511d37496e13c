"""What a search removed and why: the counts of layouts each step of the branch and bound (search/run.py) drops,
the case rule or memory check behind each, how the removals spread over the layout axes, the overlap
switches' on / off counts, and the lines and message that report them (`rapidllm search`, counts.json).
A function of the counts alone, so a merged sharded search reports as one."""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rapidllm.search.space import OVERLAP_SWITCHES, PAR_FIELDS, Layout
from rapidllm.search.spec import SearchSpec
from rapidllm.spec.errors import SpecError

REASONS = ("invalid", "filtered", "slo", "dominated", "out_of_memory")
# the memory checks a layout can fail, in the order the search applies them (docs/search.md, "What is
# pruned"): its persistent state (weights, gradients, optimizer state) of the first or last stage alone, the
# liveness model's first or last stage, the worst stage as `predict` checks it
OOM_CHECKS = ("persistent_state", "first_last_stage", "worst_stage")
# the removals broken down by layout axis (`by_axis`), with every enumerated layout's axes as their base
BY_AXIS = ("layouts", "invalid", "out_of_memory")
# the axes of that breakdown: the parallel layout, the schedule and the micro-batch (inference: batch); not
# the attention kernel, the recompute modules or the overlap switches (those are counted on their own)
BREAKDOWN_AXES = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "fsdp", "recompute", "schedule", "virtual_stages")


def _value_text(value: Any) -> str:
    """An axis value as counts.json keys it (JSON's true / false for a switch)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _value_order(text: str) -> tuple:
    """Numbers in numeric order, then words: 2 before 16, both before 'interleaved'."""
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


@dataclass
class Counts:
    """How many layouts each step removed, under which case rule the invalid ones fell and at which memory
    check the out-of-memory ones, and how the invalid and out-of-memory ones spread over the layout axes."""
    layouts: int = 0
    evaluated: int = 0                          # fully simulated (feasible in memory)
    ranked: int = 0                             # evaluated and within every limit and filter
    removed: Counter = field(default_factory=Counter)
    invalid_by_rule: Counter = field(default_factory=Counter)
    out_of_memory_by_check: Counter = field(default_factory=Counter)
    # per overlap switch (OVERLAP_SWITCHES): layouts_on / layouts_off (enumerated with it on / off),
    # applies_off (off where it would apply), evaluated_on / evaluated_off (simulated with it on / off)
    overlaps: dict[str, Counter] = field(default_factory=lambda: {s: Counter() for s in OVERLAP_SWITCHES})
    size_axis: str = "micro_batch"              # the name of a key's micro-batch (training) or batch
    # per BY_AXIS entry: layouts by their BREAKDOWN_AXES values (one tuple per layout, summed into per-axis
    # counts only in `as_dict`: a Counter increment per layout rather than one per axis), and per-axis
    # counts already summed (a merge of shards' counts.json)
    projected: dict[str, Counter] = field(default_factory=lambda: {c: Counter() for c in BY_AXIS})
    by_axis: dict[str, dict[str, Counter]] = field(default_factory=lambda: {c: {} for c in BY_AXIS})

    def file(self, category: str, key: tuple) -> None:
        """Count a layout (its `Layout.key`) under `category` of BY_AXIS."""
        self.projected[category][PROJECT(key)] += 1

    def out_of_memory(self, check: str, key: tuple) -> None:
        """Count a layout removed as out of memory by `check` (OOM_CHECKS)."""
        self.removed["out_of_memory"] += 1
        self.out_of_memory_by_check[check] += 1
        self.file("out_of_memory", key)

    def invalid(self, rule: str, key: tuple) -> None:
        """Count a layout a case rule (or a limit met while predicting) rejects, under the rule's key."""
        self.removed["invalid"] += 1
        self.invalid_by_rule[rule] += 1
        self.file("invalid", key)

    def axis_counts(self, category: str) -> dict[str, dict[str, int]]:
        """axis -> value (as text) -> layouts of `category`, axes in BREAKDOWN_AXES order, values in order."""
        names = [*BREAKDOWN_AXES, self.size_axis]
        out: dict[str, Counter] = {a: Counter(c) for a, c in self.by_axis[category].items()}
        projected = self.projected[category]
        if projected:                   # tens of thousands of distinct tuples: summed per axis by pandas
            frame = pd.DataFrame(list(projected), columns=names).assign(n=list(projected.values()))
            for axis in names:
                for v, n in frame.groupby(axis, sort=False)["n"].sum().items():
                    out.setdefault(axis, Counter())[_value_text(v)] += int(n)
        return {a: {v: out[a][v] for v in sorted(out[a], key=_value_order)} for a in names if a in out}

    def count_overlaps(self, lay: Layout) -> None:
        """File an enumerated layout under each switch: on, or off (and whether it would apply)."""
        for s, i, applies in zip(OVERLAP_SWITCHES, OVERLAP_AT, lay.applicable):
            on = lay.key[i]
            self.overlaps[s]["layouts_on" if on else "layouts_off"] += 1
            self.overlaps[s]["applies_off"] += applies and not on

    def as_dict(self) -> dict[str, Any]:
        """The counts; `overlaps` lists only the switches that apply to some layout."""
        return {"layouts": self.layouts, "evaluated": self.evaluated, "ranked": self.ranked,
                **{r: self.removed.get(r, 0) for r in REASONS},
                "invalid_by_rule": dict(sorted(self.invalid_by_rule.items())),
                "out_of_memory_by_check": {c: self.out_of_memory_by_check.get(c, 0) for c in OOM_CHECKS},
                "by_axis": {c: self.axis_counts(c) for c in BY_AXIS},
                "overlaps": {s: {k: c[k] for k in OVERLAP_COUNTS} for s, c in self.overlaps.items()
                             if c["layouts_on"] or c["applies_off"]}}


OVERLAP_COUNTS = ("layouts_on", "layouts_off", "applies_off", "evaluated_on", "evaluated_off")
# positions in a `Layout.key` (search/space.py: the PAR_FIELDS values, then micro-batch or batch, then kernel)
OVERLAP_AT = tuple(PAR_FIELDS.index(s) for s in OVERLAP_SWITCHES)
PROJECT = operator.itemgetter(*(PAR_FIELDS.index(a) for a in BREAKDOWN_AXES), len(PAR_FIELDS))


def empty_space_message(spec: SearchSpec, counts: dict[str, Any]) -> str:
    """One line saying that nothing is left and which step removed how much."""
    parts = [f"{counts[r]} {r.replace('_', ' ')}" for r in REASONS if counts.get(r)]
    rules = ", ".join(f"{k}: {v}" for k, v in counts.get("invalid_by_rule", {}).items())
    if not counts["layouts"]:           # was "(none enumerated)": say which values left nothing to factor
        pinned = {a: spec.space[a] for a in ("tp", "cp", "pp", "dp") if a in spec.space}
        return (f"{spec.source}: space: no layout: no dp x tp x pp x cp from the space's values multiplies out to "
                f"gpus {', '.join(map(str, spec.gpus))}" + (f" (space: {pinned})" if pinned else ""))
    return (f"{spec.source}: space: no feasible layout among {counts['layouts']} "
            f"({', '.join(parts)}{f'; invalid by rule: {rules}' if rules else ''})")


# what each OOM_CHECKS entry reads as in the summary line
OOM_WORDS = {"persistent_state": "weights, gradients and optimizer state alone", "first_last_stage":
             "with activations, first or last stage", "worst_stage": "worst stage"}
SHOWN_AXES = 3              # axes a breakdown line names: those whose values' shares differ most


def breakdown_lines(counts: dict[str, Any]) -> list[str]:
    """A line per removal of BY_AXIS but the base ("layouts") that removed any layout: how many, why (the
    memory check or the case rule), and the SHOWN_AXES axes whose values differ most in the share of their
    layouts removed (the largest spread between a value's share and another's; ties in BREAKDOWN_AXES
    order), each value with its share, runs of values with the same rounded share joined (pp 1-4 100%).
    Shares are of the layouts enumerated with that value, so an axis whose every value loses the same share
    explains nothing and is not named. A function of the counts alone: deterministic, and the same for a
    merged sharded search."""
    base, lines = counts["by_axis"]["layouts"], []
    whys = {"out_of_memory": [(OOM_WORDS[c], n) for c, n in counts["out_of_memory_by_check"].items() if n],
            "invalid": sorted(counts["invalid_by_rule"].items(), key=lambda kv: (-kv[1], kv[0]))}
    for category in BY_AXIS[1:]:
        removed = counts["by_axis"][category]
        if not counts.get(category):
            continue
        shares = {a: {v: removed.get(a, {}).get(v, 0) / n for v, n in values.items()}
                  for a, values in base.items() if len(values) > 1}
        spread = {a: max(sh.values()) - min(sh.values()) for a, sh in shares.items()}
        axes = sorted((a for a in shares if round(100 * spread[a])), key=lambda a: -spread[a])[:SHOWN_AXES]
        why = ", ".join(f"{w} {n:,}" for w, n in whys[category])
        line = (f"{category.replace('_', ' ')}: {counts[category]:,} of {counts['layouts']:,} layouts ({why})")
        if axes:
            line += "; share of each value's layouts: " + "; ".join(f"{a} {_runs(shares[a])}" for a in axes)
        lines.append(line)
    return lines


def _runs(shares: dict[str, float]) -> str:
    """'1-4 100%, 8 62%, 16 0%': values in order with their shares in whole percent, a run of neighbours
    with the same percentage written first-last."""
    runs: list[list] = []
    for v, share in shares.items():
        pct = round(100 * share)
        if runs and runs[-1][2] == pct:
            runs[-1][1] = v
        else:
            runs.append([v, v, pct])
    return ", ".join(f"{a}{'' if a == b else '-' + b} {pct}%" for a, b, pct in runs)


def check_not_empty(df: pd.DataFrame, spec: SearchSpec) -> None:
    """Raise SpecError (exit 2 on the command line) when a search found no feasible layout."""
    if df.empty:
        raise SpecError(empty_space_message(spec, df.attrs["counts"]))
