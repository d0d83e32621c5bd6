"""The report: the paper's tables and figures from the pipeline's result files.

Modules (import from them; this file imports nothing so that reading a schema does not load matplotlib):

- :mod:`acerl.report.frames` — Pass@k and diagnostics files (:mod:`acerl.pipeline.records`) as DataFrames;
- :mod:`acerl.report.aggregate` — seeds -> mean +- 95% CI, significance tests, ours vs paper;
- :mod:`acerl.report.tables` — Tables 1-5 and ours vs paper; :mod:`acerl.report.stat_tables` the tests' tables
  (significance, power); :mod:`acerl.report.table_format` renders both to LaTeX and Markdown;
- :mod:`acerl.report.figures` / :mod:`acerl.report.style` — Figures 1-4;
- :mod:`acerl.report.paper` — the paper's published numbers (``config/paper_results/``);
- :mod:`acerl.report.spec` — display names and table layout (:class:`~acerl.report.spec.ReportSpec`);
- :mod:`acerl.report.render` — :func:`~acerl.report.render.render_all` writes everything;
- :mod:`acerl.report.study` — ``acerl report``: a configured study's files -> report;
- :mod:`acerl.report.__main__` — ``acerl report paper``: the paper's tables from ``config/paper_results/``;
- the tools ``acerl report power|sequential|training|methods`` (:mod:`acerl.commands`).

See docs/reports.md.
"""
