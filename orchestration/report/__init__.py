"""The report: tables (CSV/Markdown/LaTeX) and figures (PNG/PDF) from a run's result rows.

`build_report(run_dir) -> Path` writes run_dir/report/ (index.md, index.html, tables/, figures/;
the selection it shows is run_dir/results/selection.csv). Every table and figure is a pure function of
the long-form result rows (poxm_core.common.results) selected by orchestration.selection. See docs/report.md.
"""
__all__ = ["build_report"]


def __getattr__(name: str):
    # build_report on first use: importing a light part of the report (its claims' declarations, the
    # table format) must not import every table and figure module, matplotlib and SciPy with it
    if name == "build_report":
        from orchestration.report.build import build_report
        return build_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
