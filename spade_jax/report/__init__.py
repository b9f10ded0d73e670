"""End-of-run report: `report.html` in the run directory, with PNG plots of the metrics.

Sections: the run's summary (as given), the learning curves of the key quantities (with a control run's
curves dashed, when the run has one: `write_report(..., control=<control run dir>)`), a trained-vs-control
table of their last values, the first and last generated environments side by side, an environment browser
sorted by regret (mutations linked to their parents and back), the diagnostic plots, and the last value of
every metric.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from spade_jax.report.envs import browser, side_by_side
from spade_jax.report.plots import KEY_PANELS, PANELS, Line, Panel, key_lines, plot_metrics, series
from spade_jax.rundir.metrics import read_metrics

__all__ = ["KEY_PANELS", "PANELS", "Line", "Panel", "key_lines", "plot_metrics", "read_control", "write_report"]

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.plots img{width:49%;margin:.25%;border:1px solid #ddd;vertical-align:top}
table{border-collapse:collapse} td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:left;
vertical-align:top;font-size:14px} th{background:#f3f4f6}
pre{background:#f6f8fa;padding:.8em;overflow:auto;font-size:12px;max-height:42em}
.s{color:#777;font-size:85%} .links{font-size:90%;margin-top:.2em} .ok{color:#1a7f37} .bad{color:#b42318}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1.2em} .pair .col{min-width:0} .pair h3{font-size:16px}
table.browser{width:100%;table-layout:fixed} table.browser td{overflow-wrap:anywhere} tr.env:target{background:#fff7d6}
.num{text-align:right;font-variant-numeric:tabular-nums}"""
# Following a link to a collapsed entry opens it.
_SCRIPT = """function openTarget(){var t=document.getElementById(location.hash.slice(1));
if(t){var d=t.querySelector('details');if(d)d.open=true;}}
window.addEventListener('hashchange',openTarget);window.addEventListener('load',openTarget);"""


def read_control(control: str | Path | None) -> list[dict[str, Any]] | None:
    """The control run's metric rows: `control` is its run directory or its metrics.jsonl (None: none)."""
    if control is None:
        return None
    path = Path(control)
    path = path / "metrics.jsonl" if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"control run: no metrics file at {path}")
    return read_metrics(path)


def _num(v: Any) -> str:
    return "&ndash;" if v is None else html.escape(f"{v:.4g}" if isinstance(v, float) else str(v))


def _last(rows: list[dict[str, Any]], name: str) -> float | None:
    points = series(rows).get(name)
    return points[1][-1] if points else None


def _key_table(rows: list[dict[str, Any]], control_rows: list[dict[str, Any]] | None) -> str:
    names = [n for ns in KEY_PANELS.values() for n in ns]
    if control_rows is None:
        head = "<tr><th>quantity</th><th>last value</th></tr>"
        body = "".join(f"<tr><td>{n}</td><td class=num>{_num(_last(rows, n))}</td></tr>" for n in names)
    else:
        head = "<tr><th>quantity</th><th>this run</th><th>control (lr 0)</th><th>difference</th></tr>"
        body = ""
        for n in names:
            a, b = _last(rows, n), _last(control_rows, n)
            diff = a - b if a is not None and b is not None else None
            body += (f"<tr><td>{n}</td><td class=num>{_num(a)}</td><td class=num>{_num(b)}</td>"
                     f"<td class=num>{_num(diff)}</td></tr>")  # fmt: skip
    return f"<table>{head}{body}</table>"


def _images(panels: list[Panel]) -> str:
    return "".join(f'<img src="{p.path.name}" alt="{html.escape(p.title)}">' for p in panels)


def write_report(
    run_dir: str | Path,
    *,
    envs: list[dict[str, Any]] = (),
    summary: dict[str, Any] | None = None,
    title: str = "spade-jax run",
    control: str | Path | None = None,
) -> Path:
    """Renders `run_dir/report.html` from `metrics.jsonl`, the environment rows and a summary table; with
    `control` (a control run's directory or metrics.jsonl) the key curves show the control's, dashed."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    control_rows = read_control(control)
    key, diag = plot_metrics(rows, run_dir, control_rows)
    envs = list(envs)
    last: dict[str, Any] = {}
    for row in rows:
        last.update({k: v for k, v in row.items() if v is not None})
    table = dict(summary or {})
    table.update({k: v for k, v in sorted(last.items()) if k not in table})
    cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{_num(v)}</td></tr>" for k, v in table.items())
    drawn = {line.label for p in key for line in p.lines}
    missing = [n for ns in KEY_PANELS.values() for n in ns if n not in drawn]
    note = f"<p class=s>Not logged in this run: {', '.join(missing)}.</p>" if missing else ""
    if control is not None:
        note = (f"<p>Dashed: the control run (the same run with learning rate 0), "
                f"<code>{html.escape(str(control))}</code>.</p>") + note  # fmt: skip
    given = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{_num(v)}</td></tr>" for k, v in (summary or {}).items())
    run_summary = f"<h2>Run summary</h2><table>{given}</table>" if given else ""
    n_valid = sum(1 for e in envs if e.get("verdict_valid") or e.get("verdict") == "valid")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>
{run_summary}<h2>Learning curves</h2>{note}<div class=plots>{_images(key) or "<p>No metrics yet.</p>"}</div>
<h2>Key quantities (last value)</h2>{_key_table(rows, control_rows)}
<h2>First and last generated environments</h2>{side_by_side(envs)}
<h2>Environments by regret</h2><p class=s>{len(envs)} recorded, {n_valid} valid; highest regret first,
unmeasured last. Click a name for its code.</p>{browser(envs)}
<h2>Diagnostics</h2><div class=plots>{_images(diag) or "<p>No metrics yet.</p>"}</div>
<h2>Summary (last value of each metric)</h2><details><summary>{len(table)} entries</summary>
<table>{cells}</table></details></body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path
