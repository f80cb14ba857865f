"""Exact position probabilities of a Plackett-Luce ranking (sampling without replacement).

A slate drawn from probabilities pi_1..pi_m by Plackett-Luce without replacement is the order of
independent exponential arrival times E_j ~ Exp(rate pi_j) (equivalently Gumbel-top-k). Label y
lands at position l exactly when l-1 other labels arrive before it:

  P(y at position l) = ∫_0^∞ pi_y e^{-pi_y t} [z^{l-1}] Π_{j≠y} (e^{-pi_j t} + (1 - e^{-pi_j t}) z) dt

(the Gumbel-integral / exponential-race formula). For l <= k <= 5 only the first k coefficients of
the product are needed, so one quadrature node costs O(m k) for the prefix and suffix products
and O(m k^2) for the leave-one-out products: no m^k enumeration. Position 1 is pi_y exactly.

Quadrature: composite Gauss-Legendre in x = log t over [t_lo, t_hi] per row, panels at most
`panel_width` wide in x. The neglected tails are bounded: before t_lo at least two arrivals are
needed (probability <= t_lo^2 / 2, the total rate is 1), after t_hi some label among the
min(k, m+) largest has not arrived (probability <= k e^{-pi_(k) t_hi}). The default (8 nodes per
panel of width 1) is accurate to ~1e-12 against enumeration (tests/poxm_core/estimators/test_plackett_luce.py).

Peaked rows. In x = log t every factor e^{-pi_j t} switches from 1 to 0 over a few units around
x = log(1/pi_j), whatever pi_j, so panels of width 1 resolve a label of probability 1e-300 as well as
one of 0.3; and such a label matters (after the top label it is drawn at position 2 with probability
~1 when it is the second largest), so its part of the range cannot be cut. The range is bounded:
x_hi - x_lo <= log log(k/TAIL) + 745 + 17.3 (745 = -log of the smallest positive float64, a
denormal), at most 766 panels. What does not fit in float64 is t itself: once pi_(k) < ~2e-307,
log(k/TAIL)/pi_(k) overflows (the upper end was inf, and its panel count `int(ceil(inf))` raised
OverflowError) and nodes t = e^x pass e^709.8. Such a row (pi_(k) < 2^-1000) is solved with its
rates multiplied by 2^128 instead: Plackett-Luce depends only on the ratios of the rates, the
product is exact (a power of two; denormals become normal numbers) and the row's nodes stay in
[e^-107, e^660]. Every other row is computed exactly as before, bit for bit. A chunk's hardest row
sets the number of panels of the whole chunk, so a chunk holding such a row takes up to 766 panels
(an ordinary one 20-40): slower, never wrong. The slate metrics therefore hand this module groups of
rows that fit their memory bound at the nodes they need (`row_nodes`, `node_bounded_groups`): POTEC's
rows (a second round e^-600 below the first, ~5,000 nodes) apart from the ordinary ones.
"""
from __future__ import annotations

import numpy as np

TAIL = 1e-15          # bound on each neglected tail of the integral
PANEL_WIDTH = 1.0     # panel width in log t
ORDER = 8             # Gauss-Legendre nodes per panel
# a row whose min(k, m+)-th largest probability is below TINY_WK is solved with its rates times RESCALE
# (module docstring): 2^-1000 keeps t <= e^697 without it, 2^-1074 * 2^128 keeps t <= e^660 with it
TINY_WK = 2.0 ** -1000
RESCALE = 2.0 ** 128


def _log_range(probs: np.ndarray, kmax: int):
    """Each row's integration range in x = log t, (lo, hi), and the factor (c,) its rates are multiplied
    by (1, or RESCALE for a row too peaked for float64's t)."""
    c, m = probs.shape
    npos = (probs > 0).sum(1)
    srt = -np.sort(-probs, axis=1)
    wk = srt[np.arange(c), np.clip(np.minimum(kmax, npos) - 1, 0, m - 1)]
    wk = np.where(wk > 0, wk, 1.0)   # a row without mass: any range (its integrand is zero)
    scale = np.where(wk < TINY_WK, RESCALE, 1.0)
    wk = wk * scale
    # total rate `scale`: the two-arrivals bound (scale t_lo)^2 / 2 moves t_lo down by the same factor
    lo = 0.5 * np.log(2 * TAIL) - np.log(scale)                           # (c,)
    hi = np.log(np.log(kmax / TAIL) / wk)
    return lo, hi, scale


def _nodes(probs: np.ndarray, kmax: int, panel_width: float, order: int):
    """Per-row quadrature nodes t (c, T), weights dt (c, T) over [t_lo_i, t_hi_i] and the factor (c,)
    the row's rates are multiplied by (1, or RESCALE for a row too peaked for float64's t)."""
    c = probs.shape[0]
    lo, hi, scale = _log_range(probs, kmax)
    n_panels = max(1, int(np.ceil((hi - lo).max() / panel_width)))
    xg, wg = np.polynomial.legendre.leggauss(order)
    h = (hi - lo) / n_panels                                              # (c,)
    left = lo[:, None] + h[:, None] * np.arange(n_panels)                 # (c, P)
    x = (left[:, :, None] + 0.5 * h[:, None, None] * (xg + 1)).reshape(c, -1)
    t = np.exp(x)
    dt = (0.5 * h[:, None, None] * wg).repeat(n_panels, 1).reshape(c, -1) * t   # dx -> dt
    return t, dt, scale


def _times_linear(poly: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """poly(z) * (a + b z), truncated to poly's degree; poly (..., D), a and b (...). NumPy arrays or
    torch tensors alike (`position_sums_torch` uses it too)."""
    out = poly * a[..., None]
    out[..., 1:] += poly[..., :-1] * b[..., None]
    return out


def _fill_prefix_suffix(pre, suf, poly, a, b) -> None:
    """pre[j] = poly x the first j relevant columns' factors, suf[j] = the factors after column j (the
    leave-one-out products), filled in place: one recurrence for the NumPy arrays and the torch tensors."""
    r = pre.shape[0]
    pre[0] = poly
    suf[r - 1] = 0.0
    suf[r - 1][..., 0] = 1.0
    for j in range(1, r):
        pre[j] = _times_linear(pre[j - 1], a[:, :, j - 1], b[:, :, j - 1])
        suf[r - 1 - j] = _times_linear(suf[r - j], a[:, :, r - j], b[:, :, r - j])


def position_sums(probs: np.ndarray, values: np.ndarray, kmax: int, *, panel_width: float = PANEL_WIDTH,
                  order: int = ORDER) -> np.ndarray:
    """S[i, l, f] = Σ_j values[i, j, f] P_i(column j at position l+1), l < kmax -> (c, kmax, F).

    probs (c, m) rows summing to 1 (zeros allowed: such a column never enters the slate; a row with
    fewer than kmax positive columns has zero probability at the positions beyond them);
    values (c, m, F), typically non-zero on few columns (the relevant labels). Leave-one-out products
    are formed only for those r columns: the product over the other columns is one pass over m.
    """
    c, m = probs.shape
    out = np.empty((c, kmax, values.shape[2]))
    out[:, 0] = np.einsum("cm,cmf->cf", probs, values)
    if kmax == 1:
        return out
    t, dt, scale = _nodes(probs, kmax, panel_width, order)
    T = t.shape[1]
    probs = probs * scale[:, None]    # rates from here on (same position probabilities)
    # the r columns of each row that carry a value (padded with columns of value 0 and rate 0)
    rel = np.any(values != 0, axis=2) & (probs > 0)
    r = max(1, int(rel.sum(1).max()))
    cols = np.argsort(~rel, axis=1, kind="stable")[:, :r]
    take = np.take_along_axis(rel, cols, 1)
    p_rel = np.where(take, np.take_along_axis(probs, cols, 1), 0.0)         # (c, r)
    v_rel = np.where(take[..., None], np.take_along_axis(values, cols[..., None], 1), 0.0)
    p_other = np.where(rel, 0.0, probs)                                       # rate 0 = factor 1
    # N(z) = Π over the other columns of (a + b z), a = P(not arrived by t), b = 1 - a
    poly = np.zeros((c, T, kmax))
    poly[..., 0] = 1.0
    # on a rescaled row rate x t may overflow to inf at the last nodes (the ratio of its largest to its
    # smallest rate can pass float64's range): e^-inf = 0 and -expm1(-inf) = 1 are the right limits
    with np.errstate(over="ignore"):
        for j in range(m):
            if not p_other[:, j].any():
                continue
            rt = p_other[:, None, j] * t
            poly = _times_linear(poly, np.exp(-rt), -np.expm1(-rt))
        rt = p_rel[:, None, :] * t[:, :, None]                               # (c, T, r)
    a, b = np.exp(-rt), -np.expm1(-rt)
    pre = np.empty((r, c, T, kmax))   # pre[j] = N(z) Π_{j'<j}; suf[j] = Π_{j'>j} over the relevant columns
    suf = np.empty((r, c, T, kmax))
    _fill_prefix_suffix(pre, suf, poly, a, b)
    dens = np.moveaxis(p_rel[:, None, :] * a * dt[:, :, None], -1, 0)     # (r, c, T): arrival density x dt
    for deg in range(1, kmax):   # position deg+1: exactly deg others arrived before
        loo = pre[..., 0] * suf[..., deg]
        for e in range(1, deg + 1):
            loo += pre[..., e] * suf[..., deg - e]
        out[:, deg] = np.einsum("jc,cjf->cf", (dens * loo).sum(2), v_rel)
    return out


def elements_per_row(m: int, r: int, kmax: int, nodes: int = 300) -> int:
    """float64 elements one row with r relevant columns needs in `position_sums` (for chunking); `nodes`
    may be an array (one count per row)."""
    return (2 * r * kmax + 4 * r + kmax + 2) * nodes + 3 * m


def row_nodes(probs: np.ndarray, kmax: int, *, panel_width: float = PANEL_WIDTH, order: int = ORDER) -> np.ndarray:
    """(c,) quadrature nodes each row needs on its own (`_nodes` gives a chunk the most of its rows)."""
    lo, hi, _ = _log_range(probs, kmax)
    return order * np.maximum(1, np.ceil((hi - lo) / panel_width)).astype(np.int64)


def node_bounded_groups(probs: np.ndarray, r: int, kmax: int, max_elems: int) -> list[np.ndarray]:
    """The rows of one chunk as groups whose `position_sums` working arrays (at the nodes the group's
    hardest row needs) hold at most `max_elems` elements: [all rows] when they fit together (the usual
    case: the values are bit for bit the chunk's own), else the rows ordered by the nodes they need and
    cut greedily, so that a few peaked rows (POTEC's two-stage scores put a second-round label e^-600
    below the first: 16 times the nodes of an ordinary row) neither blow the memory bound nor lend their
    600 panels to every other row. A single row over the bound is a group of its own."""
    c, m = probs.shape
    nodes = row_nodes(probs, kmax)
    if c <= 1 or c * elements_per_row(m, r, kmax, int(nodes.max())) <= max_elems:
        return [np.arange(c)]
    order = np.argsort(nodes, kind="stable")
    per_row = elements_per_row(m, r, kmax, nodes[order])     # ascending: a group's last row needs the most
    groups, start = [], 0
    while start < c:
        fits = np.arange(1, c - start + 1) * per_row[start:] <= max_elems      # the group [start, start + i]
        size = c - start if fits.all() else max(1, int(np.argmin(fits)))
        groups.append(np.sort(order[start:start + size]))
        start += size
    return groups


# ---- the same quadrature in torch (float64), for evaluation on a GPU -----------------------------------
# Same nodes, same recurrences, same order of products as `position_sums`: on the same rows the results
# agree with the NumPy ones to round-off (tests/poxm_core/estimators/test_plackett_luce.py), and a trial's exact slate metrics
# no longer wait on the host (docs/performance.md: most of a GPU trial's evaluation was this loop in NumPy).

def _nodes_torch(probs, kmax: int, panel_width: float, order: int):
    import torch

    c, m = probs.shape
    npos = (probs > 0).sum(1)
    srt = torch.sort(probs, dim=1, descending=True).values
    wk = srt[torch.arange(c, device=probs.device), torch.clamp(torch.clamp(npos, max=kmax) - 1, 0, m - 1)]
    wk = torch.where(wk > 0, wk, torch.ones_like(wk))
    scale = torch.where(wk < TINY_WK, torch.full_like(wk, RESCALE), torch.ones_like(wk))
    wk = wk * scale
    lo = 0.5 * np.log(2 * TAIL) - torch.log(scale)
    hi = torch.log(np.log(kmax / TAIL) / wk)
    n_panels = max(1, int(np.ceil(float((hi - lo).max()) / panel_width)))
    xg, wg = (torch.as_tensor(v, dtype=probs.dtype, device=probs.device) for v in np.polynomial.legendre.leggauss(order))
    h = (hi - lo) / n_panels
    left = lo[:, None] + h[:, None] * torch.arange(n_panels, dtype=probs.dtype, device=probs.device)
    x = (left[:, :, None] + 0.5 * h[:, None, None] * (xg + 1)).reshape(c, -1)
    t = torch.exp(x)
    dt = (0.5 * h[:, None, None] * wg).repeat(1, n_panels, 1).reshape(c, -1) * t
    return t, dt, scale


def position_sums_torch(probs, values, kmax: int, *, panel_width: float = PANEL_WIDTH, order: int = ORDER):
    """`position_sums` on torch float64 tensors (any device): (c, m) probs, (c, m, F) values -> (c, kmax, F)."""
    import torch

    probs, values = probs.to(torch.float64), values.to(torch.float64)
    c, m = probs.shape
    F = values.shape[2]
    out = torch.empty((c, kmax, F), dtype=probs.dtype, device=probs.device)
    out[:, 0] = torch.einsum("cm,cmf->cf", probs, values)
    if kmax == 1:
        return out
    t, dt, scale = _nodes_torch(probs, kmax, panel_width, order)
    T = t.shape[1]
    probs = probs * scale[:, None]
    rel = torch.any(values != 0, dim=2) & (probs > 0)
    r = max(1, int(rel.sum(1).max()))
    cols = torch.argsort((~rel).to(torch.uint8), dim=1, stable=True)[:, :r]
    take = torch.gather(rel, 1, cols)
    zero = torch.zeros((), dtype=probs.dtype, device=probs.device)
    p_rel = torch.where(take, torch.gather(probs, 1, cols), zero)
    v_rel = torch.where(take[..., None], torch.gather(values, 1, cols[..., None].expand(c, r, F)), zero)
    p_other = torch.where(rel, zero, probs)
    poly = torch.zeros((c, T, kmax), dtype=probs.dtype, device=probs.device)
    poly[..., 0] = 1.0
    active = p_other.any(0).tolist()      # columns of rate 0 in every row multiply by exactly 1: skipped
    for j in range(m):
        if not active[j]:
            continue
        rt = p_other[:, None, j] * t
        poly = _times_linear(poly, torch.exp(-rt), -torch.expm1(-rt))
    rt = p_rel[:, None, :] * t[:, :, None]
    a, b = torch.exp(-rt), -torch.expm1(-rt)
    pre = torch.empty((r, c, T, kmax), dtype=probs.dtype, device=probs.device)
    suf = torch.empty_like(pre)
    _fill_prefix_suffix(pre, suf, poly, a, b)
    dens = torch.movedim(p_rel[:, None, :] * a * dt[:, :, None], -1, 0)
    for deg in range(1, kmax):
        loo = pre[..., 0] * suf[..., deg]
        for e in range(1, deg + 1):
            loo = loo + pre[..., e] * suf[..., deg - e]
        out[:, deg] = torch.einsum("jc,cjf->cf", (dens * loo).sum(2), v_rel)
    return out
