"""A partition inspected: the ``[clients, classes]`` count matrix, its skew, a printable
summary and a PNG plot (``fedpart partition``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedpart.errors import DataError


def label_matrix(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``[clients, classes]`` sample counts of ``parts`` (indices into ``labels``)."""
    y = np.asarray(labels)
    out = np.zeros((len(parts), num_classes), dtype=np.int64)
    for i, part in enumerate(parts):
        counts = np.bincount(y[np.asarray(part, dtype=np.int64)], minlength=num_classes)
        if len(counts) > num_classes:
            raise DataError(f"a label is >= num_classes={num_classes}")
        out[i] = counts
    return out


def skew(matrix: np.ndarray) -> float:
    """Mean total-variation distance between each client's label distribution and the global one.

    0 for identical distributions; approaches 1 when clients hold classes that are rare overall.
    Clients without samples are ignored.
    """
    m = np.asarray(matrix, dtype=np.float64)
    sizes = m.sum(axis=1)
    total = m.sum()
    if total <= 0 or not np.any(sizes > 0):
        return 0.0
    glob = m.sum(axis=0) / total
    local = m[sizes > 0] / sizes[sizes > 0, None]
    return float(np.mean(0.5 * np.abs(local - glob).sum(axis=1)))


def describe_partition(matrix: np.ndarray) -> str:
    """Printable summary of a ``[clients, classes]`` count matrix.

    One line per client (size, number of labels, counts per label, or the five largest labels
    when there are more than 20 classes), then the size range, labels per client and the skew.
    """
    m = np.asarray(matrix, dtype=np.int64)
    num_clients, num_classes = m.shape
    sizes = m.sum(axis=1)
    nlabels = (m > 0).sum(axis=1)
    width = max(len(str(int(m.max(initial=0)))), 3)
    lines = []
    if num_classes <= 20:
        head = " ".join(f"{k:>{width}}" for k in range(num_classes))
        lines.append(f"{'client':>6} {'size':>7} {'labels':>6}  counts per label: {head}")
        pad = " " * len("counts per label: ")
        for i in range(num_clients):
            row = " ".join(f"{int(v):>{width}}" for v in m[i])
            lines.append(f"{i:>6} {int(sizes[i]):>7} {int(nlabels[i]):>6}  {pad}{row}")
    else:
        lines.append(f"{'client':>6} {'size':>7} {'labels':>6}  largest labels (label:count)")
        for i in range(num_clients):
            top = np.argsort(-m[i], kind="stable")[:5]
            row = " ".join(f"{int(k)}:{int(m[i, k])}" for k in top if m[i, k] > 0)
            lines.append(f"{i:>6} {int(sizes[i]):>7} {int(nlabels[i]):>6}  {row}")
    if num_clients:
        lines.append(
            f"{num_clients} clients, {int(sizes.sum())} samples; client size min {int(sizes.min())}"
            f" / median {float(np.median(sizes)):g} / max {int(sizes.max())}"
        )
        lines.append(
            f"labels per client: mean {float(nlabels.mean()):.2f} (min {int(nlabels.min())}, "
            f"max {int(nlabels.max())}) of {num_classes}"
        )
    lines.append(
        f"skew (mean total-variation distance to the global label distribution): {skew(m):.3f}"
    )
    return "\n".join(lines)


def plot_label_matrix(matrix: np.ndarray, path: str | os.PathLike, title: str = "") -> None:
    """Write a PNG of the client x label counts: a bubble plot, or a heatmap when it is large."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    m = np.asarray(matrix, dtype=np.float64)
    num_clients, num_classes = m.shape
    fig = Figure(
        figsize=(min(4 + 0.25 * num_clients, 16), min(3 + 0.25 * num_classes, 12)), dpi=100
    )
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if num_clients * num_classes <= 2500:
        cx, cy = np.nonzero(m)
        scale = 300.0 / m.max() if m.max() > 0 else 0.0
        ax.scatter(cx, cy, s=m[cx, cy] * scale, c="tab:red", alpha=0.6, edgecolors="none")
        if scale:  # a key for the bubble areas, outside the axes so it hides no bubble
            sizes = sorted({max(1, round(m.max() * f)) for f in (1.0, 0.5, 0.1)}, reverse=True)
            for size in sizes:
                ax.scatter([], [], s=size * scale, c="tab:red", alpha=0.6, label=f"{size}")
            ax.legend(
                title="samples",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                labelspacing=1.5,
                borderpad=1.0,
                fontsize="small",
            )
        ax.set_xlim(-0.5, num_clients - 0.5)
        ax.set_ylim(-0.5, num_classes - 0.5)
        ax.grid(True, alpha=0.3)
    else:
        im = ax.imshow(m.T, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
        fig.colorbar(im, ax=ax, label="samples")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("label")
    ax.set_title(title or f"{num_clients} clients x {num_classes} labels, skew {skew(m):.3f}")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", bbox_inches="tight")
