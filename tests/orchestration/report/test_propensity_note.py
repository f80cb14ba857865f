"""The report's Run section names the datasets whose propensities were estimated (dataset option
`logging_propensities: estimated`), and says nothing when the recorded ones were used."""
from __future__ import annotations

from orchestration.report.build import propensity_note


def test_named_when_estimated_silent_otherwise():
    cfg = {"datasets": [{"name": "bibtex", "logging_propensities": "estimated"}, {"name": "delicious"},
                        {"name": "eurlex-4k", "logging_propensities": "recorded"}]}
    note = propensity_note(cfg)
    assert "**estimated** on bibtex (" in note and "delicious" not in note and "eurlex" not in note
    assert propensity_note({"datasets": [{"name": "bibtex"}]}) == ""
    assert propensity_note({}) == ""
