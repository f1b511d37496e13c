"""Shared matplotlib setup: headless backend and deterministic output (no timestamps in PDFs)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}}


def save(fig: "plt.Figure", stem: str | Path) -> list[Path]:
    """Save `fig` as stem.png and stem.pdf with fixed metadata so reruns give the same bytes."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path, dpi=150, bbox_inches="tight", metadata=METADATA[ext])
        paths.append(path)
    plt.close(fig)
    return paths
