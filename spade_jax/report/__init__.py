"""End-of-run report: `report.html` in the run directory, one self-contained file (its plots embedded as data
URIs: it can be mailed or moved alone), with the same plots as PNGs beside it.

Sections: the headline (the held-out win rate at the run's end, every held-out game's, and the last values of
the rollout win rate and the designer's valid rate; with a control run, both side by side), the run's summary
(as given), the learning curves of the key quantities (with a control run's curves dashed, when the run has one:
`write_report(..., control=<control run dir>)`), a trained-vs-control table of their last values, the first and
last generated environments side by side, an environment browser sorted by regret (mutations linked to their
parents and back; each entry's code and the agent's plays of it, hinted and not, from transcripts.jsonl), the
diagnostic plots, and the last value of every metric.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from spade_jax.report.envs import browser, side_by_side
from spade_jax.report.plots import KEY_PANELS, PANELS, Line, Panel, key_lines, plot_metrics, series
from spade_jax.rundir.metrics import read_metrics
from spade_jax.rundir.transcripts import read as read_transcripts

__all__ = ["KEY_PANELS", "PANELS", "Line", "Panel", "key_lines", "plot_metrics", "read_control", "write_report"]

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.plots img{width:49%;margin:.25%;border:1px solid #ddd;vertical-align:top}
table{border-collapse:collapse} td,th{border-bottom:1px solid #eee;padding:3px 10px;text-align:left;
vertical-align:top;font-size:14px} th{background:#f3f4f6}
pre{background:#f6f8fa;padding:.8em;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere;margin:.4em 0}
.s{color:#777;font-size:85%} .links{font-size:90%;margin-top:.2em} .ok{color:#1a7f37} .bad{color:#b42318}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1.2em} .pair .col{min-width:0} .pair h3{font-size:16px}
.headline{display:flex;gap:1.2em;flex-wrap:wrap;margin:1em 0} .fig{border:1px solid #ddd;border-radius:6px;
padding:.6em 1em;min-width:12em} .fig .v{font-size:28px;font-weight:600} .fig .l{font-size:13px;color:#555}
.env{border-bottom:1px solid #eee;padding:.4em 0} .env:target{background:#fff7d6}
.browser .row{display:grid;grid-template-columns:3em minmax(14em,3fr) repeat(9,minmax(5em,1fr));gap:.4em;
font-size:14px} .browser .head{font-weight:600;background:#f3f4f6;padding:3px 0} .env details{margin:.3em 0 0 3.4em}
.plays{display:grid;grid-template-columns:1fr 1fr;gap:1em} .plays>div{min-width:0}
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
    return "".join(f'<img src="{p.data_uri}" alt="{html.escape(p.title)}">' for p in panels)


def _pct(v: float | None) -> str:
    return "&ndash;" if v is None else f"{100 * v:.0f}%"


def _last_row_with(rows: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((r for r in reversed(rows) if r.get(name) is not None), None)


def headline(rows: list[dict[str, Any]], control_rows: list[dict[str, Any]] | None = None) -> str:
    """The figures a reader looks for first: the held-out win rate at the end of the run (and per held-out game),
    the last rollout win rate and designer valid rate; each with the control's beside it when there is one."""
    last = _last_row_with(rows, "eval/win_rate")
    figs = []
    if last is None:
        figs.append("<div class=fig><div class=v>&ndash;</div><div class=l>held-out win rate: not measured in "
                    "this run (loop.eval_plays=0, or no held-out games)</div></div>")  # fmt: skip
    else:
        ctl = _last_row_with(control_rows or [], "eval/win_rate")
        vs = f" <span class=s>(control {_pct(ctl['eval/win_rate'])})</span>" if ctl else ""
        figs.append(f"<div class=fig><div class=v>{_pct(last['eval/win_rate'])}{vs}</div><div class=l>held-out "
                    f"win rate, unhinted, at step {last['step']}</div></div>")  # fmt: skip
    for name, label in (("rollout/win_rate_no_hint", "rollout win rate, unhinted"),
                        ("design/valid_frac", "designer valid rate")):  # fmt: skip
        row = _last_row_with(rows, name)
        if row is not None:
            ctl = _last_row_with(control_rows or [], name)
            vs = f" <span class=s>(control {_pct(ctl[name])})</span>" if ctl else ""
            figs.append(f"<div class=fig><div class=v>{_pct(row[name])}{vs}</div><div class=l>{label}, step "
                        f"{row['step']}</div></div>")  # fmt: skip
    games = ""
    if last is not None:
        per = sorted((k.removeprefix("eval/win_rate_"), v) for k, v in last.items()
                     if k.startswith("eval/win_rate_") and v is not None)  # fmt: skip
        if per:
            cells = "".join(f"<tr><td>{html.escape(g)}</td><td class=num>{_pct(v)}</td></tr>" for g, v in per)
            games = f"<table><tr><th>held-out game</th><th>win rate</th></tr>{cells}</table>"
    return f"<div class=headline>{''.join(figs)}</div>{games}"


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
    plays = read_transcripts(run_dir)
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
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    span = f"steps {min(steps)}-{max(steps)}" if steps else "no steps yet"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>
<p class=s>{span}</p>{headline(rows, control_rows)}
{run_summary}<h2>Learning curves</h2>{note}<div class=plots>{_images(key) or "<p>No metrics yet.</p>"}</div>
<h2>Key quantities (last value)</h2>{_key_table(rows, control_rows)}
<h2>First and last generated environments</h2>{side_by_side(envs)}
<h2>Environments by regret</h2><p class=s>{len(envs)} recorded, {n_valid} valid; highest regret first,
unmeasured last. Open an entry for its code and the agent's plays of it.</p>{browser(envs, plays)}
<h2>Diagnostics</h2><div class=plots>{_images(diag) or "<p>No metrics yet.</p>"}</div>
<h2>Summary (last value of each metric)</h2><details><summary>{len(table)} entries</summary>
<table>{cells}</table></details></body></html>"""
    path = run_dir / "report.html"
    path.write_text(page)
    return path
