"""A timeline document drawn as a static figure (matplotlib): one row per pipeline stage's compute track.

Drawn from the trace-event document itself (`explore.timeline.timeline`), so the picture in the docs, the
explorer and the JSON a user opens in Perfetto are the same slices. Deterministic bytes (figures.style).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection

from rapidllm.figures.style import METADATA, plt

COLORS = {"F": "#4c78a8", "B": "#f58518", "compute": "#54a24b", "exposed_comm": "#e45756", "bubble": "#d9d9d9",
          "prefill": "#4c78a8", "decode": "#f58518", "p2p": "#b279a2"}
LEGEND = {"F": "forward", "B": "backward (recompute + dgrad + wgrad)", "compute": "optimizer",
          "exposed_comm": "exposed communication wait", "bubble": "bubble", "prefill": "prefill",
          "decode": "decode", "p2p": "activation send"}


def _rows(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(track name, slices) of the first process's stage tracks, in their sort order."""
    names, order = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["pid"] == 1 and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["pid"] == 1 and e["name"] == "thread_sort_index":
            order[e["tid"]] = e["args"]["sort_index"]
    keep = [t for t in names if names[t].startswith("stage") and "compute" in names[t]] or list(names)
    slices: dict[int, list[dict[str, Any]]] = {t: [] for t in keep}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == 1 and e["tid"] in slices:
            slices[e["tid"]].append(e)
    return [(names[t], slices[t]) for t in sorted(keep, key=lambda t: order[t])]


def timeline_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """One row per slice of the stage compute tracks: track, its order, slice name, what it is (legend
    label), start and end in ms, micro-batch (-1 when none). What the figure and the explorer's chart draw."""
    rows = []
    for y, (track, evs) in enumerate(_rows(doc)):
        for e in evs:
            if e["cat"] in COLORS:
                rows.append((track, y, e["name"], LEGEND[e["cat"]], e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3,
                             e["args"].get("micro_batch", -1)))
    return pd.DataFrame(rows, columns=["track", "row", "slice", "kind", "start_ms", "end_ms", "micro_batch"])


def title_of(doc: dict[str, Any]) -> str:
    """The case and its headline split, from the document's otherData."""
    other = doc.get("otherData", {})
    if other.get("ttft_s"):
        return (f"{other.get('title', '')}\nTTFT {other['ttft_s'] * 1e3:.1f} ms, mean ITL "
                f"{other['itl_s'] * 1e3:.2f} ms, latency {other['e2e_latency_s']:.3f} s")
    if "step_time_s" in other:
        return (f"{other.get('title', '')}\nstep {other['step_time_s'] * 1e3:.1f} ms = compute "
                f"{other['compute_time_s'] * 1e3:.1f} + exposed comm {other['exposed_comm_s'] * 1e3:.1f} "
                f"+ bubble {other['bubble_s'] * 1e3:.1f} ms")
    return str(other.get("title", ""))


def plot_timeline(doc: dict[str, Any], title: str = "") -> "plt.Figure":
    """Gantt chart of the stage compute tracks: forward, backward, optimizer, waits and bubble."""
    df = timeline_frame(doc)
    tracks = df.drop_duplicates("row").sort_values("row").track.tolist()
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(tracks) + 1.6))
    seen: list[str] = []
    for cat, label in LEGEND.items():             # one polygon collection per colour: fast for 10^4 slices
        sel = df[df.kind == label]
        if sel.empty or label in seen:
            continue
        x0, x1, y = sel.start_ms.to_numpy(), sel.end_ms.to_numpy(), sel.row.to_numpy(dtype=float)
        verts = np.stack([np.stack([x0, y - 0.4], 1), np.stack([x0, y + 0.4], 1),
                          np.stack([x1, y + 0.4], 1), np.stack([x1, y - 0.4], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors=COLORS[cat], edgecolors="white", linewidths=0.2))
        seen.append(label)
    ax.autoscale_view()
    ax.set_yticks(range(len(tracks)), tracks)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or title_of(doc), fontsize=9)
    colors = {LEGEND[c]: COLORS[c] for c in COLORS}
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[label]) for label in seen]
    ax.legend(handles, seen, loc="upper center", ncol=len(handles),
              bbox_to_anchor=(0.5, -0.62 / (0.45 * len(tracks) + 0.6)), fontsize=8, frameon=False)
    return fig


def vega_spec(doc: dict[str, Any], frame: pd.DataFrame) -> dict[str, Any]:
    """The same chart as a Vega-Lite spec (zoom and pan on time, a tooltip per slice) for the explorer;
    `frame` (`timeline_frame(doc)`) is its data."""
    present = set(frame.kind)
    colors = {LEGEND[c]: COLORS[c] for c in COLORS if LEGEND[c] in present}
    return {"title": {"text": title_of(doc).split("\n"), "fontSize": 11},
            "mark": {"type": "bar", "stroke": "white", "strokeWidth": 0.2},
            "height": {"step": 26},
            "encoding": {
                "y": {"field": "track", "type": "nominal", "sort": {"field": "row"}, "title": None},
                "x": {"field": "start_ms", "type": "quantitative", "title": "time (ms)"},
                "x2": {"field": "end_ms"},
                "color": {"field": "kind", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
                          "scale": {"domain": list(colors), "range": list(colors.values())}},
                "tooltip": [{"field": "slice"}, {"field": "kind"}, {"field": "micro_batch"},
                            {"field": "start_ms", "format": ".3f"}, {"field": "end_ms", "format": ".3f"}]},
            "params": [{"name": "zoom", "select": "interval", "bind": "scales", "encodings": ["x"]}]}


def save_timeline_png(doc: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Write `plot_timeline(doc)` as a PNG with fixed metadata (same document, same bytes)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = plot_timeline(doc, title)
    fig.savefig(out, dpi=130, bbox_inches="tight", metadata=METADATA["png"])
    plt.close(fig)
    return out
