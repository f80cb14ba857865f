"""The report: tables (CSV/Markdown/LaTeX) and figures (PNG/PDF) from a run's result rows.

`orchestration.report.build.build_report(run_dir) -> Path` writes run_dir/report/ (index.md, index.html, tables/, figures/;
the selection it shows is run_dir/results/selection.csv). Every table and figure is a pure function of
the long-form result rows (poxm_core.common.results) selected by orchestration.selection. See docs/report.md.
"""
# nothing is imported here: a light part of the report (its claims' declarations, the table format) must
# be importable without every table and figure module, matplotlib and SciPy
