"""A timeline document drawn as a static figure (matplotlib): one row per pipeline stage's compute track.

Drawn from the trace-event document itself (`explore.timeline.timeline`), so the picture in the docs, the
explorer and the JSON a user opens in Perfetto are the same slices. Deterministic bytes (figures.style).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

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


def plot_timeline(doc: dict[str, Any], title: str = "") -> "plt.Figure":
    """Gantt chart of the stage compute tracks: forward, backward, optimizer, waits and bubble."""
    rows = _rows(doc)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(rows) + 1.6))
    seen: set[str] = set()
    for y, (_name, evs) in enumerate(rows):
        for cat in COLORS:
            bars = [(e["ts"] / 1e3, e["dur"] / 1e3) for e in evs if e["cat"] == cat]
            if bars:
                ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=COLORS[cat], edgecolor="white", linewidth=0.2)
                seen.add(cat)
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    other = doc.get("otherData", {})
    if not title and other.get("ttft_s"):
        title = (f"{other.get('title', '')}\nTTFT {other['ttft_s'] * 1e3:.1f} ms, mean ITL {other['itl_s'] * 1e3:.2f} ms, "
                 f"latency {other['e2e_latency_s']:.3f} s")
    elif not title and "step_time_s" in other:
        title = (f"{other.get('title', '')}\nstep {other['step_time_s'] * 1e3:.1f} ms = compute "
                 f"{other['compute_time_s'] * 1e3:.1f} + exposed comm {other['exposed_comm_s'] * 1e3:.1f} "
                 f"+ bubble {other['bubble_s'] * 1e3:.1f} ms")
    ax.set_title(title, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in COLORS if c in seen]
    ax.legend(handles, [LEGEND[c] for c in COLORS if c in seen], loc="upper center", ncol=len(handles),
              bbox_to_anchor=(0.5, -0.62 / (0.45 * len(rows) + 0.6)), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def save_timeline_png(doc: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Write `plot_timeline(doc)` as a PNG with fixed metadata (same document, same bytes)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig = plot_timeline(doc, title)
    fig.savefig(out, dpi=130, bbox_inches="tight", metadata=METADATA["png"])
    plt.close(fig)
    return out
