"""The report's environment sections: a browser sorted by regret (mutations linked to their parents and
back), and the run's first and last generated environments side by side.

Rows are memory rows (`EnvRecord` fields as dicts, as `report_envs` makes them from the memory): id, code, name, kind,
skill, origin, mutation_of, parent_id, win rates, regret, designer_reward, step, plays, verdict_*.
"""

from __future__ import annotations

import html
from typing import Any

GENERATED = ("designer", "mutation")  # origins of environments the designer wrote


def anchor(env_id: str) -> str:
    """The HTML id of an environment's browser entry."""
    return f"env-{env_id}"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _no_hint(env: dict[str, Any]) -> float | None:
    value = env.get("win_rate_no_hint")
    return env.get("win_rate_nohint") if value is None else value


def measured(env: dict[str, Any]) -> bool:
    """Played at least once (its unhinted win rate is known)."""
    return _no_hint(env) is not None


def valid(env: dict[str, Any]) -> bool:
    return bool(env.get("verdict_valid", env.get("valid", env.get("verdict") == "valid")))


def by_regret(envs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured environments by regret, highest first (ties: the latest step first); unmeasured ones last
    (valid before rejected, then latest first)."""
    return sorted(envs, key=lambda e: (not measured(e), -(e.get("regret") or 0.0) if measured(e) else 0.0,
                                       not valid(e), -(e.get("step") or 0), str(e.get("id"))))  # fmt: skip


def children(envs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """parent id -> the mutations made of it (in step order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for env in sorted(envs, key=lambda e: (e.get("step") or 0, str(e.get("id")))):
        if env.get("mutation_of"):
            out.setdefault(env["mutation_of"], []).append(env)
    return out


def first_last(envs: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first and the last valid environment the designer wrote (origin designer or mutation), by step
    then creation time; (None, None) when there is none, the same row twice when there is one."""
    made = sorted((e for e in envs if e.get("origin") in GENERATED and valid(e)),
                  key=lambda e: (e.get("step") or 0, e.get("created") or 0.0, str(e.get("id"))))  # fmt: skip
    return (made[0], made[-1]) if made else (None, None)


def _fmt(value: Any) -> str:
    if value is None:
        return "&ndash;"
    return _esc(f"{value:.3g}" if isinstance(value, float) else value)


def _name(env: dict[str, Any]) -> str:
    return str(env.get("name") or env.get("id") or "environment")


def _link(env: dict[str, Any] | None, env_id: str) -> str:
    """A link to an entry of the browser; plain text when the row is not in the report."""
    if env is None:
        return f"{_esc(env_id)} <span class=s>(not in this report)</span>"
    return f'<a href="#{_esc(anchor(env_id))}">{_esc(_name(env))}</a>'


def verdict(env: dict[str, Any]) -> str:
    if env.get("verdict"):
        return str(env["verdict"])
    if valid(env):
        return "valid"
    return f"rejected at {env.get('verdict_gate')}: {env.get('verdict_reason')}"


def stats_table(env: dict[str, Any]) -> str:
    """A two-column table of an environment's figures."""
    rows = [
        ("kind", env.get("kind")),
        ("skill", env.get("skill")),
        ("origin", env.get("origin")),
        ("step", env.get("step")),
        ("win rate, no hint", _no_hint(env)),
        ("win rate, hint", env.get("win_rate_hint")),
        ("regret", env.get("regret")),
        ("designer reward", env.get("designer_reward")),
        ("plays", env.get("plays")),
        ("verdict", verdict(env)),
    ]
    cells = "".join(f"<tr><td>{k}</td><td>{_fmt(v)}</td></tr>" for k, v in rows)
    return f"<table class=stats>{cells}</table>"


_HEAD = ("#", "environment", "kind", "skill", "origin", "win (no hint)", "win (hint)", "regret", "designer reward",
         "step", "verdict")  # fmt: skip


def _plays_html(plays: list[dict[str, Any]]) -> str:
    """The agent's plays of one environment, hinted beside unhinted (the last step that has each)."""
    cols = []
    for cond, label in (("hint", "Agent with the hint"), ("no_hint", "Agent without the hint")):
        mine = [p for p in plays if p.get("condition") == cond]
        if not mine:
            cols.append(f"<div><b>{label}</b><p class=s>no play recorded</p></div>")
            continue
        p = mine[-1]
        won = "won" if p.get("won") else "not won"
        note = f"step {p.get('step')}, return {_fmt(p.get('return'))}, {won}, {p.get('turns')} turns"
        note += f", ended: {p.get('end')}"
        cols.append(
            f"<div><b>{label}</b> <span class=s>({_esc(note)})</span><pre>{_esc(p.get('text', ''))}</pre></div>"
        )
    return f"<div class=plays>{''.join(cols)}</div>"


def browser(envs: list[dict[str, Any]], plays: list[dict[str, Any]] = ()) -> str:
    """Every environment by regret (highest first, unmeasured last): one entry each (anchor `env-<id>`) with its
    figures, links from a mutation to its parent and from a parent to its mutations, and, opened, its whole code
    and the agent's plays of it (`plays`: transcripts.jsonl rows, hinted and unhinted) at the page's full width."""
    if not envs:
        return "<p>No environments recorded.</p>"
    by_id = {e.get("id"): e for e in envs}
    kids = children(envs)
    by_env: dict[str, list[dict[str, Any]]] = {}
    for p in plays:
        by_env.setdefault(str(p.get("env_id")), []).append(p)
    head = "<div class='row head'>" + "".join(f"<div>{h}</div>" for h in _HEAD) + "</div>"
    entries = []
    for i, env in enumerate(by_regret(envs), 1):
        eid = str(env.get("id"))
        links = []
        if env.get("mutation_of"):
            parent = env["mutation_of"]
            links.append(f"mutation of {_link(by_id.get(parent), parent)}")
        if env.get("parent_id"):
            links.append(f"repair of {_link(by_id.get(env['parent_id']), env['parent_id'])}")
        if kids.get(eid):
            links.append("mutations: " + ", ".join(_link(c, str(c["id"])) for c in kids[eid]))
        v = verdict(env)
        status = "ok" if valid(env) else "bad"
        mine = by_env.get(eid, [])
        what = "code" + (" and the agent's plays" if mine else "")
        entries.append(
            f'<div id="{_esc(anchor(eid))}" class=env><div class=row><div>{i}</div>'
            f"<div><b>{_esc(_name(env))}</b>{_id_note(env)}"
            + (f"<div class=links>{'; '.join(links)}</div>" if links else "")
            + f"</div><div>{_fmt(env.get('kind'))}</div><div>{_fmt(env.get('skill'))}</div>"
            f"<div>{_fmt(env.get('origin'))}</div><div class=num>{_fmt(_no_hint(env))}</div>"
            f"<div class=num>{_fmt(env.get('win_rate_hint'))}</div><div class=num>{_fmt(env.get('regret'))}</div>"
            f"<div class=num>{_fmt(env.get('designer_reward'))}</div><div class=num>{_fmt(env.get('step'))}</div>"
            f'<div class={status} title="{_esc(v)}">{_esc(_short(v))}</div></div>'
            f"<details><summary>{what}</summary><pre>{_esc(env.get('code', ''))}</pre>"
            + (_plays_html(mine) if mine else "")
            + "</details></div>"
        )
    return f"<div class=browser>{head}{''.join(entries)}</div>"


def _id_note(env: dict[str, Any]) -> str:
    """The row id after the name, where it says more than the name does."""
    eid = str(env.get("id"))
    return "" if eid in (_name(env), f"seed-{_name(env)}") else f" <span class=s>{_esc(eid)}</span>"


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def side_by_side(envs: list[dict[str, Any]]) -> str:
    """The first and the last generated valid environment in two columns, each with its figures and code."""
    first, last = first_last(envs)
    if first is None:
        return "<p>The designer wrote no valid environment in this run.</p>"
    if first is last:
        cols = [("The only generated environment", first)]
    else:
        cols = [("First generated environment", first), ("Last generated environment", last)]
    parts = [
        f"<div class=col><h3>{title}: {_link(env, str(env.get('id')))}</h3>{stats_table(env)}"
        f"<pre>{_esc(env.get('code', ''))}</pre></div>"
        for title, env in cols
    ]
    return f"<div class=pair>{''.join(parts)}</div>"


def report_envs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Memory rows in the report's vocabulary (newest designer output first, seeds last)."""
    out = []
    for r in sorted(rows, key=lambda r: (r.get("origin") == "seed", -(r.get("step") or 0))):
        gate, reason = r.get("verdict_gate"), r.get("verdict_reason")
        verdict = "valid" if r.get("verdict_valid") else f"rejected at {gate}: {reason}"
        out.append({**r, "name": r.get("name") or r["id"], "verdict": verdict,
                    "win_rate_nohint": r.get("win_rate_no_hint")})  # fmt: skip
    return out
