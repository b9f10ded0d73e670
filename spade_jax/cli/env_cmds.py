"""Environment commands: `validate-env` (run every gate on one program), `env-run` (host-pool owner) and
`export-envs` (a run's archive in the paper's released-pool layout, plus a table `datasets` loads).

Nothing here imports JAX: these commands start in milliseconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from spade_jax.config.sandbox import LEVEL_CHOICES as SANDBOX_LEVELS
from spade_jax.envs.text import printable_line


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the environment commands to the `spade-jax` parser."""
    _register_validate_env(subparsers)
    _register_env_run(subparsers)
    _register_export_envs(subparsers)
    p = subparsers.add_parser(
        "sandbox-level",
        help="print the sandbox level this host gets (the launchers run it on every host)",
        description="Probes gvisor > bwrap > process by starting a worker with each; prints one line, "
        "'<host>: sandbox level <level>' (and why a stronger one does not work). Exit 0 unless none works.",
    )
    p.add_argument("--sandbox", choices=SANDBOX_LEVELS, default="auto", help="the level to check (default: auto)")
    p.set_defaults(func=_sandbox_level)


def _sandbox_level(args: argparse.Namespace) -> int:
    import logging
    import socket

    from spade_jax.sandbox.launchers import SandboxUnavailable, detect_level

    notes: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            notes.append(record.getMessage())

    logger = logging.getLogger("spade_jax")
    handler, level = _Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        got = detect_level(args.sandbox)
    except SandboxUnavailable as e:
        print(f"{socket.gethostname()}: no sandbox level works: {e}")
        return 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    why = next((n.split(" (", 1)[1].rstrip(")") for n in notes if " (" in n), "")
    print(f"{socket.gethostname()}: sandbox level {got}" + (f" ({why})" if why else ""))
    return 0


# ------------------------------------------------------------------------------------------ validate-env


def _register_validate_env(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate-env",
        help="run the validation gates on an environment program (or a designer completion)",
        description="Runs extract, static, load, reset, step, determinism, termination, random-play, hint "
        "and novelty gates; prints the verdict, the gate reached and the reason. Exit 0 only when valid.",
    )
    p.add_argument("file", help="environment source (.py) or a designer completion with a ```python block")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--sandbox", choices=SANDBOX_LEVELS, default="auto", help="isolation level (default: auto)")
    p.add_argument("--max-turns", type=int, default=25, help="max_turns the environment is built with")
    p.add_argument("--call-timeout", type=float, default=None, help="seconds per env call (sandbox default)")
    p.add_argument(
        "--against-seeds", action="store_true", help="check novelty against the seed library (skipping a seed "
        "whose source is identical to FILE)",
    )  # fmt: skip
    p.set_defaults(func=_validate_env)


def _read_source(path_arg: str) -> str:
    path = Path(path_arg)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if not path.is_file():
        raise ValueError(f"not a file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _seed_archive(source: str) -> dict[str, str]:
    from spade_jax.envs.seeds import list_seeds, load_seed_source

    archive = {s.name: load_seed_source(s.name) for s in list_seeds()}
    return {k: v for k, v in archive.items() if v.strip() != source.strip()}


def _validate_env(args: argparse.Namespace) -> int:
    from spade_jax.gates.sandboxed import GateConfig, validate, validate_static

    source = _read_source(args.file)
    if args.max_turns < 1:
        raise ValueError(f"--max-turns must be >= 1, got {args.max_turns}")
    config = GateConfig(max_turns=args.max_turns)
    verdict = validate_static(source, config=config)
    if verdict.valid:  # start sandbox workers only for code worth running
        import sys

        from spade_jax.sandbox.host_pool import HostPool
        from spade_jax.sandbox.launchers import SandboxConfig, SandboxUnavailable

        sandbox_kwargs = {"level": args.sandbox}
        if args.call_timeout is not None:
            sandbox_kwargs["call_timeout_s"] = args.call_timeout
        archive = _seed_archive(verdict.source) if args.against_seeds else {}
        try:
            pool = HostPool(num_workers=1, sandbox=SandboxConfig(**sandbox_kwargs))
        except SandboxUnavailable as e:
            print(f"spade-jax validate-env: error: {printable_line(e)}", file=sys.stderr)
            return 2
        try:
            verdict = validate(verdict.source, pool, archive=archive, config=config)
        finally:
            pool.close()
    if args.json:  # ensure_ascii: every control character and non-ASCII one is a \u escape
        print(json.dumps({"file": args.file, **verdict.to_dict()}, indent=2, default=str))
    else:
        _print_verdict(args.file, verdict)
    return 0 if verdict.valid else 1


def _print_verdict(file: str, verdict) -> None:
    """The verdict in a few lines; what the environment wrote (reason, names) has its control characters escaped,
    so it cannot repaint the verdict or drive the terminal."""
    from spade_jax.envs.text import printable

    d = verdict.details
    status = "VALID" if verdict.valid else "INVALID"
    print(printable(f"{status}  {file}"))
    print(printable(f"  gate:   {verdict.gate}"))
    print(printable(f"  reason: {verdict.reason}"))
    facts = []
    if d.get("class_name"):
        facts.append(f"class {d['class_name']}" + (f"({d['base']})" if d.get("base") else ""))
    if d.get("contract"):
        facts.append(f"contract {d['contract']}")
    if d.get("kind"):
        facts.append(f"kind {d['kind']}")
    if "random_win_rate" in d:
        facts.append(f"random play {d['random_wins']}/{d['random_episodes']} ({d['random_policy']} policy)")
    if "reference_win_rate" in d:
        facts.append(f"reference policy wins {d['reference_win_rate']:.0%}")
    if d.get("sandbox"):
        facts.append(f"sandbox {d['sandbox']}")
    if "seconds" in d:
        facts.append(f"{d['seconds']:.2f} s, {d.get('calls', 0)} calls")
    if facts:
        print(printable("  " + "; ".join(str(f) for f in facts)))


# ------------------------------------------------------------------------------------------------ env-run


def _register_env_run(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "env-run",
        help="play given actions in an environment program inside the sandbox",
        description="Loads FILE in a sandboxed worker, resets it and plays the --actions in order, printing "
        "each transition (observation, reward, terminated, truncated, info) or the structured failure. "
        "Exit 0 when every call succeeded.",
    )
    p.add_argument("file", help="environment source (.py)")
    p.add_argument("--actions", action="append", default=[], metavar="A", help="an action (repeat for more)")
    p.add_argument("--seed", type=int, default=None, help="seed passed to reset()")
    p.add_argument("--sandbox", choices=SANDBOX_LEVELS, default="auto", help="isolation level (default: auto)")
    p.add_argument("--max-turns", type=int, default=None, help="max_turns the environment is built with")
    p.add_argument("--call-timeout", type=float, default=None, help="seconds per env call (default 5)")
    p.add_argument("--hint", action="store_true", help="also print the environment's hint()")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=_env_run)


def _env_run(args: argparse.Namespace) -> int:
    import sys

    from spade_jax.envs.formats import complete_imports
    from spade_jax.sandbox.host_pool import HostPool
    from spade_jax.sandbox.launchers import SandboxConfig, SandboxUnavailable

    source = complete_imports(_read_source(args.file))  # as the gates and pools load it
    sandbox_kwargs: dict = {"level": args.sandbox}
    if args.call_timeout is not None:
        if args.call_timeout <= 0:
            raise ValueError(f"--call-timeout must be > 0, got {args.call_timeout}")
        sandbox_kwargs["call_timeout_s"] = args.call_timeout
    env_kwargs = {} if args.max_turns is None else {"max_turns": args.max_turns}
    try:
        pool = HostPool(num_workers=1, sandbox=SandboxConfig(**sandbox_kwargs))
    except SandboxUnavailable as e:
        print(f"spade-jax env-run: error: {printable_line(e)}", file=sys.stderr)
        return 2
    emit = _emit_json if args.json else _emit_text
    failed = False
    try:
        with pool.open(source, env_kwargs=env_kwargs) as session:
            load = session.load_result
            emit({"event": "load", "sandbox": pool.level, **_result_fields(load, None)})
            calls = [("reset", None, lambda: session.reset(args.seed))]
            calls += [("hint", None, session.hint)] if args.hint else []
            calls += [("step", a, lambda a=a: session.step(a)) for a in args.actions]
            if not load.ok:
                return 1
            for i, (event, action, fn) in enumerate(calls):
                result = fn()
                record = {"event": event, **({"action": action} if event == "step" else {})}
                if event == "reset":
                    record["seed"] = args.seed
                emit({**record, **_result_fields(result, event)})
                if not result.ok:
                    failed = True
                    break
                if event == "step" and isinstance(result.value, list) and len(result.value) == 5:
                    if result.value[2] or result.value[3]:
                        left = sum(1 for c in calls[i + 1 :] if c[0] == "step")
                        emit({"event": "end", "reason": "terminated" if result.value[2] else "truncated",
                              "unplayed_actions": left})  # fmt: skip
                        break
    finally:
        pool.close()
    return 1 if failed else 0


def _result_fields(result, event: str | None) -> dict:
    if not result.ok:
        return {"ok": False, "error": result.error, "message": result.message, "traceback": result.traceback}
    v = result.value
    if event == "reset" and isinstance(v, list) and len(v) == 2:
        return {"ok": True, "observation": v[0], "info": v[1]}
    if event == "step" and isinstance(v, list) and len(v) == 5:
        keys = ("observation", "reward", "terminated", "truncated", "info")
        return {"ok": True, **dict(zip(keys, v))}
    if event == "hint":
        return {"ok": True, "hint": v}
    return {"ok": True, "value": v}


def _emit_json(record: dict) -> None:
    """One JSON line; DEL, C1 and bidi controls (which ensure_ascii=False leaves raw) become \\u escapes."""
    from spade_jax.envs.text import printable

    print(printable(json.dumps(record, ensure_ascii=False, default=str), json_escapes=True), flush=True)


def _emit_text(record: dict) -> None:
    """One event as text, every part the environment wrote with its control characters escaped."""
    from spade_jax.envs.text import printable

    print(printable(_event_text(record)), flush=True)


def _event_text(record: dict) -> str:
    """The text of one event (observation, info, failure and traceback included), unescaped."""
    event = record["event"]
    if event == "end":
        return f"episode {record['reason']} ({record['unplayed_actions']} action(s) not played)"
    head = f"[{event}]" + (f" {record['action']!r}" if "action" in record else "")
    if not record.get("ok", True):
        text = f"{head} FAILED {record['error']}: {record['message']}"
        if record.get("traceback"):
            text += "\n  " + record["traceback"].rstrip().replace("\n", "\n  ")
        return text
    if event == "load":
        v = record.get("value") if isinstance(record.get("value"), dict) else {}
        methods = ", ".join(str(m) for m in v.get("methods", []))
        return f"{head} {v.get('env_class')} in sandbox {record['sandbox']} (methods: {methods})"
    if event == "reset":
        return f"{head} seed={record['seed']}\n{record['observation']}\n  info: {json.dumps(record['info'])}"
    if event == "hint":
        return f"{head} {record['hint']}"
    if event == "step":
        return (f"{head} reward={record['reward']} terminated={record['terminated']} truncated={record['truncated']}"
                f"\n{record['observation']}\n  info: {json.dumps(record['info'])}")  # fmt: skip
    return f"{head} {json.dumps(record.get('value'))}"


# -------------------------------------------------------------------------------------------- export-envs


def _register_export_envs(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export-envs",
        help="write a run's environment archive in the layout of the paper's released environment pool",
        description="Writes OUT/games/game_{step}_{index}_{skill}.py (each source as stored), manifest.jsonl, "
        "envs.jsonl and envs.parquet (the rows with their sources, for datasets.load_dataset) and "
        "checksums.sha256. Reads memory.sqlite read-only; OUT must not exist or be empty.",
    )
    p.add_argument("--run-dir", required=True, help="run directory (holds memory.sqlite)")
    p.add_argument("--out", required=True, help="output directory (new or empty)")
    p.add_argument("--all-origins", action="store_true", help="include seed and pool environments too")
    p.add_argument(
        "--status", default="valid", metavar="S[,S]",
        help="statuses to export: valid, invalid, evicted, retired (default: valid, the archive)",
    )  # fmt: skip
    p.set_defaults(func=_export_envs)


def _export_envs(args: argparse.Namespace) -> int:
    from spade_jax.export.envs import export_envs

    statuses = tuple(s.strip() for s in args.status.split(",") if s.strip())
    result = export_envs(args.run_dir, args.out, all_origins=args.all_origins, statuses=statuses)
    which = "all origins" if args.all_origins else "generated (no seed or pool)"
    parquet = "" if result.parquet else " (no envs.parquet: pyarrow is not installed)"
    print(f"exported {result.count} environment(s) [{which}, status {','.join(statuses)}] to {result.out}: "
          f"games/, manifest.jsonl, envs.jsonl{', envs.parquet' if result.parquet else ''}, checksums.sha256"
          f"{parquet}")  # fmt: skip
    return 0
