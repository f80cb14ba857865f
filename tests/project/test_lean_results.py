"""scripts/lean_results.py: the per-instance arrays a published folder keeps are those a claim or the
logging-quality landscape reads, so that its tables rebuild from the folder as they were published."""
from __future__ import annotations

import io
import lzma

import numpy as np

from scripts.lean_results import claim_pairs, keep_claim_arrays, kept_keys


def _key(method: str, metric: str, seed: int = 0) -> str:
    return f"bibtex|P|{seed}|{method}|10|0.9|{metric}"


def test_claims_and_landscape_arrays_are_kept_and_nothing_else():
    assert ("wpoxm", "PSR@5") in claim_pairs() and ("poxm", "R@5") in claim_pairs()
    keys = [_key(m, x) for m in ("poxm", "wpoxm", "skyline") for x in ("R@5", "P@5", "PSR@5", "nDCG@5")]
    kept = kept_keys(keys)
    # the landscape's: every method's greedy P@5 and stochastic R@5 (the skyline's too, which no claim reads)
    assert {_key(m, x) for m in ("poxm", "wpoxm", "skyline") for x in ("R@5", "P@5")} <= kept
    # a claim's: wPOXM's PSR@5 (wPOXM > POXM), and POXM's PSR@5 on the other side of it
    assert _key("wpoxm", "PSR@5") in kept and _key("poxm", "PSR@5") in kept
    # read by nothing: the skyline's PSR@5, any nDCG
    assert _key("skyline", "PSR@5") not in kept and not any("nDCG" in k for k in kept)


def test_keep_claim_arrays_writes_the_kept_arrays_xz_compressed(tmp_path):
    npz = tmp_path / "bibtex_P.npz"
    arrays = {_key("skyline", x): np.arange(4, dtype=np.float16) + i for i, x in enumerate(("P@5", "nDCG@5"))}
    np.savez_compressed(npz, **arrays)
    out = keep_claim_arrays(npz)
    assert out.name == "bibtex_P.npz.xz" and not npz.exists()
    with np.load(io.BytesIO(lzma.decompress(out.read_bytes()))) as z:
        assert z.files == [_key("skyline", "P@5")]
        np.testing.assert_array_equal(z[_key("skyline", "P@5")], arrays[_key("skyline", "P@5")])
