"""Class 4 of issue 47: a pool directory is untrusted input.

Every layout of tests/hostile/pool_layouts.py (as someone who ships a pool could build it) is loaded by
`load_pool` in a child process with a memory bound and a time limit, so the attacks that worked before (a
FIFO that hangs, /dev/zero that eats memory) end the child, not this test. What must hold: only regular files
inside the pool are read (no symlinked file or directory, no FIFO or device), a size bound checked before
reading, a pool with checksums loads only the files it lists, and every refusal is one printable line naming
the file (terminal escapes escaped); names and skills that come out of a pool are plain text that SQLite and
the terminal take. The CLI's error line escapes what it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "hostile"))
import pool_layouts  # noqa: E402

CHILD = r"""
import json, resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from spade_jax.envs.pools import load_pool

class Hung(Exception):
    pass

def alarm(*_):
    raise Hung()

signal.signal(signal.SIGALRM, alarm)
out = {}
for kind, path in json.loads(sys.argv[1]).items():
    signal.alarm(5)
    try:
        envs = load_pool(path)
        out[kind] = {"ok": True, "names": [e.name.encode("utf-8", "backslashreplace").decode() for e in envs],
                     "encodable": all(_ok for _ok in (e.name.isprintable() and e.skill.isprintable()
                                                       and not any(0xd800 <= ord(c) <= 0xdfff for c in e.name + e.skill)
                                                       for e in envs)),
                     "paths": [str(e.path.resolve()) if e.path else "" for e in envs],
                     "outside": any("OUTSIDE-MARKER" in e.source for e in envs)}
    except Hung:
        out[kind] = {"hung": True}
    except MemoryError:
        out[kind] = {"memory": True}
    except ValueError as e:
        out[kind] = {"refused": str(e)}
    except BaseException as e:
        out[kind] = {"raised": f"{type(e).__name__}: {e}"}
    finally:
        signal.alarm(0)
print(json.dumps(out, ensure_ascii=True))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pools")
    outside = tmp / "elsewhere" / "not_in_the_pool.py"  # any readable Python file on the host
    outside.parent.mkdir()
    outside.write_text(pool_layouts.HONEST.replace('NAME = "coin"', 'NAME = "outside"  # OUTSIDE-MARKER'))
    outside_dir = tmp / "elsewhere_dir"
    outside_dir.mkdir()
    (outside_dir / "game_00000_000_logical_deduction.py").write_text(outside.read_text())
    roots = {k: pool_layouts.build(k, tmp / k, outside=outside, outside_dir=outside_dir, huge_mb=24)
             for k in pool_layouts.KINDS}  # fmt: skip
    # a fourth route to a name no store takes: the program's own NAME attribute, a lone surrogate in a literal
    flat = tmp / "surrogate_attr"
    flat.mkdir()
    (flat / "coin.py").write_text(pool_layouts.HONEST.replace('NAME = "coin"', 'NAME = "coin\\udcff\\x1b[2J"'))
    roots["surrogate_attr"] = flat
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    arg = json.dumps({k: str(v) for k, v in roots.items()})
    proc = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {k: {**v, "root": str(roots[k].resolve())} for k, v in json.loads(proc.stdout.splitlines()[-1]).items()}


def _one_clean_line(text: str) -> None:
    assert "\n" not in text and "\x1b" not in text and "\x07" not in text, ascii(text)
    text.encode("utf-8")


@pytest.mark.parametrize("kind", ["symlink_file", "symlink_dir", "fifo", "dev_zero", "huge", "unlisted"])
def test_only_listed_regular_files_inside_the_pool_are_read(outcomes, kind):
    got = outcomes[kind]
    assert "refused" in got, f"{kind}: {got}"  # before: read outside / hung / memory / loaded unverified
    _one_clean_line(got["refused"])
    assert "game_0000" in got["refused"] or "games" in got["refused"], got["refused"]
    if kind == "huge":  # refused for its size, before it is read (not for what reading it found)
        assert "limit" in got["refused"], got["refused"]


@pytest.mark.parametrize("kind", ["escape_name", "escape_checksum"])
def test_a_refusal_names_the_file_with_its_escapes_escaped(outcomes, kind):
    got = outcomes[kind]
    assert "refused" in got, got
    _one_clean_line(got["refused"])
    assert "\\x1b" in got["refused"] or "game_00007" in got["refused"], got["refused"]


@pytest.mark.parametrize("kind", ["surrogate_name", "surrogate_attr"])
def test_names_and_skills_are_plain_text_or_refused(outcomes, kind):
    got = outcomes[kind]
    if "refused" in got:
        _one_clean_line(got["refused"])
    else:
        assert got.get("ok") and got["encodable"], got


def test_the_cli_error_line_is_escaped(tmp_path, capsys):
    from spade_jax.cli import main

    root = pool_layouts.build("escape_checksum", tmp_path / "p")
    assert main(["eval", "--model", "smollm2-135m", "--pool", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error:" in err and "\x1b" not in err and "\x07" not in err, ascii(err)
