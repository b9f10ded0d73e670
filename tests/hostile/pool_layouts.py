"""Hostile pool directories in the released layout (games/*.py, manifest.jsonl, checksums.sha256), as someone who
hands out an environment pool could ship them. Not an environment: `build(kind, root)` writes one layout under
`root` (FIFOs, symlinks and undecodable names cannot live in git, so they are made here); redteam/pool.py loads
each with spade_jax.envs.pools.load_pool (tests/test_containment_pools.py).

kinds:
  symlink_file    games/game_00001_000_logic.py -> a Python file outside the pool (`outside`); checksums.sha256
                  lists only the honest game, so verification passes and the outside file is loaded.
  symlink_dir     games -> a directory outside the pool (`outside_dir`): every *.py there is loaded.
  fifo            games/game_00002_000_logic.py is a FIFO: reading it blocks forever.
  dev_zero        games/game_00003_000_logic.py -> /dev/zero: reading it never ends and takes all memory.
  huge            games/game_00004_000_logic.py is a sparse file of `huge_mb` MB: read whole, with no size cap.
  unlisted        games/ holds a game checksums.sha256 does not list (added after release): loaded, unverified.
  escape_name     a game whose file name carries terminal escapes and whose bytes are not UTF-8: the loader's
                  error line (printed raw by the CLI) carries them.
  escape_checksum checksums.sha256 names a missing file whose name carries terminal escapes.
  surrogate_name  a game whose file name holds an undecodable byte (a lone surrogate in Python); a manifest row
                  gives another game a name with a lone surrogate (JSON "\\udcff"). Loaded fine; the self-play
                  memory cannot store the name.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

HONEST = """from spade_jax.envs.base import GameEnv


class CoinEnv(GameEnv):
    KIND = "game"
    SKILL = "logical deduction"
    NAME = "coin"

    def setup(self) -> str:
        self.secret = self.rng.choice(["heads", "tails"])
        return "Heads or tails? Reply like \\\\boxed{heads}."

    def play(self, command):
        return self.win() if command == self.secret else self.lose()
"""
ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m"  # set the terminal title, clear the screen, red


def _write_release(root: Path, games: dict[str, bytes], listed: list[str] | None = None) -> None:
    """Writes games/, manifest.jsonl and checksums.sha256 (of the `listed` games: all by default)."""
    g = root / "games"
    g.mkdir(parents=True, exist_ok=True)
    for name, data in games.items():
        (g / name).write_bytes(data)
    listed = list(games) if listed is None else listed
    with open(root / "manifest.jsonl", "w") as f:
        for name in games:
            f.write(json.dumps({"file": f"games/{name}", "kind": "game", "skill": "logical deduction"}) + "\n")
    with open(root / "checksums.sha256", "w") as f:
        for name in listed:
            f.write(f"{hashlib.sha256(games[name]).hexdigest()}  games/{name}\n")


def build(
    kind: str,
    root: str | Path,
    *,
    outside: str | Path | None = None,
    outside_dir: str | Path | None = None,
    huge_mb: int = 600,
) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    honest = {"game_00000_000_logical_deduction.py": HONEST.encode()}
    g = root / "games"
    if kind == "symlink_file":
        _write_release(root, honest)
        os.symlink(os.path.abspath(outside), g / "game_00001_000_logical_deduction.py")
    elif kind == "symlink_dir":
        os.symlink(os.path.abspath(outside_dir), g)
        (root / "manifest.jsonl").write_text("")
    elif kind == "fifo":
        _write_release(root, honest)
        os.mkfifo(g / "game_00002_000_logical_deduction.py")
    elif kind == "dev_zero":
        _write_release(root, honest)
        os.symlink("/dev/zero", g / "game_00003_000_logical_deduction.py")
    elif kind == "huge":
        _write_release(root, honest)
        with open(g / "game_00004_000_logical_deduction.py", "wb") as f:
            f.truncate(huge_mb << 20)
    elif kind == "unlisted":
        extra = HONEST.replace('NAME = "coin"', 'NAME = "added_later"').encode()
        _write_release(root, {**honest, "game_00005_000_logical_deduction.py": extra}, listed=list(honest))
    elif kind == "escape_name":
        _write_release(root, honest)
        (g / f"game_00006_000_{ESC}x.py").write_bytes(b"\xff\xfe not utf-8")
    elif kind == "escape_checksum":
        _write_release(root, honest)
        with open(root / "checksums.sha256", "a") as f:
            f.write(f"{'0' * 64}  games/{ESC}game_00007.py\n")
    elif kind == "surrogate_name":
        g.mkdir(parents=True)
        (g / "game_00008_000_x.py").write_text(HONEST.replace('NAME = "coin"\n', ""))  # named by its file
        os.rename(os.fsencode(str(g / "game_00008_000_x.py")), os.fsencode(str(g)) + b"/game_00008_000_\xff.py")
        rows = [{"file": "games/game_00009_000_x.py", "name": "coin\udcff"}]
        (g / "game_00009_000_x.py").write_text(HONEST.replace('NAME = "coin"\n', ""))
        (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        raise ValueError(f"unknown layout {kind!r}")
    return root


KINDS = (
    "symlink_file",
    "symlink_dir",
    "fifo",
    "dev_zero",
    "huge",
    "unlisted",
    "escape_name",
    "escape_checksum",
    "surrogate_name",
)
