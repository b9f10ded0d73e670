"""Weights & Biases as a metrics logger beside metrics.jsonl and TensorBoard (`logger=wandb`).

A run's W&B id is kept in the run directory (`wandb_id`), so a resume continues the same W&B run. Our step is
logged as the metric `step` and declared the x-axis of every chart (W&B's own step only grows, so a step redone
after a resume shows twice there; metrics.jsonl and TensorBoard keep one). `mode="offline"` writes the run under
`<run_dir>/wandb/` for `wandb sync` later; the `WANDB_MODE` environment variable, where set, overrides the
config's mode (as it does for any W&B script). W&B's own console capture is off: the run's progress lines stay
as they are. A failure to log (storage, network) is one warning line, once, and the run goes on.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["WandbSink", "check_wandb"]

ID_FILE = "wandb_id"
INSTALL = "pip install 'spade-jax[wandb]'"


def _mode(settings: dict[str, Any]) -> str:
    return os.environ.get("WANDB_MODE") or settings.get("mode") or "online"


def check_wandb(settings: dict[str, Any]) -> None:
    """Refuses (ValueError, one line) before a run starts what would make `WandbSink` fail: wandb not installed,
    or online mode with no API key (`wandb login`, or WANDB_API_KEY)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ValueError(f"logger=wandb needs the wandb package: {INSTALL}") from None
    if _mode(settings) == "online" and not _has_api_key():
        raise ValueError("logger=wandb in online mode needs a W&B API key (`wandb login`, or WANDB_API_KEY); "
                         "or set wandb.mode=offline and `wandb sync` the run later")  # fmt: skip


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        hosts = netrc.netrc(os.environ.get("NETRC")).hosts
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return any("wandb" in host for host in hosts)


class WandbSink:
    """One W&B run for a run directory: `log(row)` per metrics row (its "step" the x-axis), `close()` at the end."""

    def __init__(self, run_dir: str | Path, settings: dict[str, Any], config: dict[str, Any] | None = None):
        check_wandb(settings)
        import wandb

        run_dir = Path(run_dir)
        id_file = run_dir / ID_FILE
        # W&B run ids: 8 lower-case letters and digits
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        self._warned = False
        self.run = wandb.init(
            project=settings.get("project") or "spade-jax",
            entity=settings.get("entity"),
            name=settings.get("name") or run_dir.name,
            group=settings.get("group"),
            tags=list(settings.get("tags") or ()),
            mode=_mode(settings),
            dir=str(run_dir),
            id=run_id,
            resume="allow",
            config=config or {},
            settings=wandb.Settings(console="off", silent=True),
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, row: dict[str, Any]) -> None:
        try:
            self.run.log({k: v for k, v in row.items() if v is not None})
        except Exception as e:  # the run goes on: metrics.jsonl holds every row
            if not self._warned:
                log.warning("wandb: logging failed (%s: %s); metrics.jsonl keeps every row", type(e).__name__, e)
                self._warned = True

    def close(self) -> None:
        import wandb

        try:
            self.run.finish()
            wandb.teardown()  # waits for W&B's service to write out the run (finish alone may return before)
        except Exception as e:
            log.warning("wandb: could not finish the run cleanly (%s: %s)", type(e).__name__, e)
