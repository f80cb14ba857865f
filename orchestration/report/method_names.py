"""How the report names methods and criteria: the paper's order of the methods, their display names,
and the criterion that chose (p, λ)."""
from __future__ import annotations

from orchestration.selection import PAPER_CRITERION

METHOD_ORDER = ["logging", "dm", "banditnet", "pm_banditnet", "poxm", "wpoxm", "dr_poxm", "supervised_logs", "potec",
                "skyline", "skyline_e2e"]
METHOD_NAMES = {"logging": "Logging policy", "dm": "Direct Method", "banditnet": "BanditNet",
                "pm_banditnet": "PM-BanditNet", "poxm": "POXM", "wpoxm": "wPOXM",
                "skyline": "Supervised skyline (frozen inputs)", "dr_poxm": "DR-POXM",
                "skyline_e2e": "Supervised skyline (end to end, the paper's)",
                "supervised_logs": "Supervised on the logs", "potec": "POTEC (slates)"}


def criterion_title(criterion: str) -> str:
    """'IS', or 'SNIS (the paper's criterion)': how tables name the criterion that chose (p, λ)."""
    return f"{criterion} (the paper's criterion)" if criterion == PAPER_CRITERION else criterion


def method_list(present: list[str]) -> list[str]:
    """The methods in `present` (those the sweep ran or expects), in the paper's order, then any other
    registered method, sorted. A method of the paper that the sweep never ran is not listed: a table or
    figure shows only the methods of its run."""
    have = set(present)
    return [m for m in METHOD_ORDER if m in have] + sorted(have - set(METHOD_ORDER))


def method_name(m: str) -> str:
    return METHOD_NAMES.get(m, m)
