"""What every report figure shares: the Figure record, saving (PNG + PDF), mean/sd over seeds, the p
axis, error bars that appear only where at least two samples contribute, and the caption sentence
that says so (so no caption promises error bars that one seed cannot give)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from orchestration.report.aggregate import per_group  # noqa: E402
from poxm_core.common.atomic import atomic_file  # noqa: E402

# Per-series styles that stay distinguishable when two lines coincide (IS and sIS at p = K):
# different markers, dash patterns and marker sizes, drawn with a small horizontal offset.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
DASHES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)), (0, (3, 1, 1, 1, 1, 1)))


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    caption: str
    paths: tuple[Path, ...]


def save(fig, out_dir: Path, name: str) -> tuple[Path, ...]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / f"{name}.png", out_dir / f"{name}.pdf")
    for p in paths:
        with atomic_file(p) as tmp:
            fig.savefig(tmp, format=p.suffix[1:], dpi=130 if p.suffix == ".png" else None, bbox_inches="tight")
    plt.close(fig)
    return paths


def mean_sd(v: pd.Series) -> pd.Series:
    v = v[np.isfinite(v.to_numpy(dtype=float))]
    return pd.Series({"mean": v.mean() if len(v) else math.nan,
                      "sd": v.std(ddof=1) if len(v) > 1 else math.nan, "n": len(v)})


def mean_sd_by(frame: pd.DataFrame, keys: list[str], col: str, prefix: str = "") -> pd.DataFrame:
    """`frame.groupby(keys)[col].apply(mean_sd).unstack()` with the keys as columns (mean, sd, n
    prefixed by `prefix`; n a float, as there), without a pandas call per group: the covering curves
    alone have hundreds of groups. numpy's mean and std(ddof=1) are pandas' (sum / n; the two-pass
    sum of squares / (n - 1)), so the numbers are mean_sd's."""
    g = frame.groupby(keys)
    stats = []
    for v in per_group(g, frame[col].to_numpy(dtype=float)):
        v = v[np.isfinite(v)]
        stats.append((v.mean() if len(v) else math.nan, v.std(ddof=1) if len(v) > 1 else math.nan, float(len(v))))
    out = g.size().index.to_frame(index=False)
    cols = pd.DataFrame(stats, columns=[f"{prefix}mean", f"{prefix}sd", f"{prefix}n"], dtype=float)
    return pd.concat([out, cols], axis=1)


def p_axis(ax, ps) -> None:
    ps = sorted(set(int(p) for p in ps))
    if len(ps) > 1 and ps[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(ps)
    ax.set_xticklabels([str(p) for p in ps])
    ax.minorticks_off()


def errorbar(ax, x, mean, sd, n, **kw):
    """A line with error bars (±1 sd) only where more than one sample contributes."""
    yerr = np.where(np.asarray(n) > 1, np.nan_to_num(np.asarray(sd, dtype=float)), 0.0)
    return ax.errorbar(x, mean, yerr=yerr if np.any(yerr > 0) else None, capsize=3, **kw)


def style(i: int) -> dict:
    return {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "linestyle": DASHES[i % len(DASHES)],
            "markersize": 7 - 1.2 * (i % 3), "markerfacecolor": "none" if i % 2 else None}


def log_offset(i: int, count: int, spread: float = 0.04) -> float:
    """Multiplicative x offset of series i of `count` on a log axis, so coinciding series stay visible."""
    return float(np.exp(spread * (i - (count - 1) / 2)))


def spread_note(n_values, what: str = "seeds", bars: str = "±1 std") -> str:
    """'n = 3 seeds; error bars/bands: ±1 std.' or 'One seed: no error bars.' from the sample counts."""
    n = [int(v) for v in np.asarray(list(n_values), dtype=float) if np.isfinite(v)]
    if not n or max(n) < 2:
        return f"One {what[:-1] if what.endswith('s') else what} per point: no error bars."
    lo, hi = min(n), max(n)
    return f"n = {lo if lo == hi else f'{lo}–{hi}'} {what} per point; error bars/bands: {bars} where n ≥ 2."
