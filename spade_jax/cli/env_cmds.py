"""Environment commands: `validate-env` (run every gate on one program) and `env-run` (host-pool owner).

Nothing here imports JAX: these commands start in milliseconds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SANDBOX_LEVELS = ("auto", "gvisor", "bwrap", "process")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the environment commands to the `spade-jax` parser."""
    _register_validate_env(subparsers)


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
    from spade_jax.envs.gates import GateConfig, validate, validate_static

    source = _read_source(args.file)
    if args.max_turns < 1:
        raise ValueError(f"--max-turns must be >= 1, got {args.max_turns}")
    config = GateConfig(max_turns=args.max_turns)
    verdict = validate_static(source, config=config)
    if verdict.valid:  # start sandbox workers only for code worth running
        from spade_jax.envs.host_pool import HostPool
        from spade_jax.envs.sandbox import SandboxConfig

        sandbox_kwargs = {"level": args.sandbox}
        if args.call_timeout is not None:
            sandbox_kwargs["call_timeout_s"] = args.call_timeout
        archive = _seed_archive(verdict.source) if args.against_seeds else {}
        pool = HostPool(num_workers=1, sandbox=SandboxConfig(**sandbox_kwargs))
        try:
            verdict = validate(verdict.source, pool, archive=archive, config=config)
        finally:
            pool.close()
    if args.json:
        print(json.dumps({"file": args.file, **verdict.to_dict()}, indent=2, default=str))
    else:
        _print_verdict(args.file, verdict)
    return 0 if verdict.valid else 1


def _print_verdict(file: str, verdict) -> None:
    d = verdict.details
    status = "VALID" if verdict.valid else "INVALID"
    print(f"{status}  {file}")
    print(f"  gate:   {verdict.gate}")
    print(f"  reason: {verdict.reason}")
    facts = []
    if d.get("class_name"):
        facts.append(f"class {d['class_name']}" + (f"({d['base']})" if d.get("base") else ""))
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
        print("  " + "; ".join(facts))
