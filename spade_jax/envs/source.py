"""One environment program and what it is: the type every supplier of environments hands on (the seed library,
named and directory pools, released-layout pools and exports), whichever contract the program follows.

Reading a file never runs it: the metadata comes from the source (`formats.env_meta`), a manifest row may
override kind, skill and name, and a program is stored with any missing standard-library imports completed
(`formats.complete_imports`, what the paper's loader tolerates), as the gates would load it. A file that is not
UTF-8, does not parse or holds no environment class is a ValueError naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spade_jax.envs.contract import KINDS
from spade_jax.envs.formats import complete_imports, env_meta, skill_from_filename
from spade_jax.envs.text import printable, safe_label

__all__ = ["EnvSource"]


@dataclass(frozen=True)
class EnvSource:
    """An environment program: its name, source text, kind (game/tool/reasoning), skill, contract (ours/gym)
    and the file it was read from, if any."""

    name: str
    source: str
    kind: str
    skill: str
    contract: str = "ours"
    path: Path | None = None

    @classmethod
    def from_file(cls, path: Path, *, name: str | None = None, row: Mapping | None = None) -> EnvSource:
        """The environment in `path`; `row` (a manifest row) overrides kind, skill and name when it has them;
        `name` fixes the name (else the manifest's, the source's NAME, or the file stem)."""
        return cls.from_bytes(path.read_bytes(), path, name=name, row=row)

    @classmethod
    def from_bytes(cls, data: bytes, path: Path, *, name: str | None = None, row: Mapping | None = None) -> EnvSource:
        """The environment whose program is `data` (read from `path` by the caller, e.g. `pool_files`); as
        `from_file`. Names and skills, wherever they come from, are plain one-line text (`text.safe_label`)."""
        where = printable(str(path)).replace("\n", "\\n")
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        meta = env_meta(source, where, default_name=path.stem)
        row = row if isinstance(row, Mapping) else {}
        kind = row["kind"] if row.get("kind") in KINDS else meta.kind
        skill = safe_label(row.get("skill") or "") or meta.skill or skill_from_filename(path.stem)
        name = safe_label(name or row.get("name") or "") or meta.name
        return cls(name, complete_imports(source), kind, skill, meta.contract, path)
