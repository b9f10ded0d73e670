"""Multi-host: two local CPU processes joined into one JAX job through `spade_jax.infra.distributed.initialize` (the
SPADE_* variables `launch/local.py` sets) run a sharded learner step over the global mesh; loss, gradient norm and
the updated parameters match one process holding the same number of devices."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

PROCESSES, DEVICES_PER_PROCESS = 2, 2
MESH = {"fsdp": 2, "tensor": 2}  # devices are ordered by process: fsdp spans the two processes, tensor stays inside
STEPS = 2


def _worker() -> None:
    """One process of the job (or the whole single-process reference); prints RESULTS <json> from process 0."""
    from spade_jax.infra.distributed import initialize

    info = initialize()  # before any other JAX call: joins the job when SPADE_NUM_PROCESSES > 1

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from spade_jax.model.config import ModelConfig
    from spade_jax.model.placement import create_sharded
    from spade_jax.model.sharding import make_mesh
    from spade_jax.rl.batch import Sample, pack_sequences
    from spade_jax.rl.learner import Learner, LearnerConfig

    cfg = ModelConfig(
        arch="qwen3", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
        num_kv_heads=2, head_dim=16, tie_embeddings=False, qk_norm=True,
    )  # fmt: skip
    mesh = make_mesh(MESH)
    rng = np.random.default_rng(0)  # same batch in every process (each one passes the global batch)
    samples = [  # half with sampler log-probs, half without (NaN "unknown" in the batch arrays)
        Sample(
            rng.integers(1, 128, 4).tolist(),
            rng.integers(1, 128, 9).tolist(),
            logprobs=(-rng.random(9) * 4).tolist() if i % 2 else None,
            advantage=float(rng.normal()),
        )
        for i in range(8)
    ]
    batch = pack_sequences(samples, length_buckets=(16,), batch_buckets=(8,), pack=False)
    learner = Learner(create_sharded(cfg, mesh, 3), LearnerConfig(lr=1e-3, donate=False), mesh=mesh)
    metrics = [learner.train_step(batch) for _ in range(STEPS)]

    params = nnx.state(learner.model, nnx.Param)
    stats = jax.jit(
        lambda t: jax.tree.map(lambda a: jnp.stack([jnp.sum(a), jnp.sum(a * a), jnp.sum(jnp.abs(a))]), t),
        out_shardings=NamedSharding(mesh, P()),
    )(params)
    checksums = {
        ".".join(map(str, p)): np.asarray(v[...].addressable_data(0)).tolist() for p, v in nnx.to_flat_state(stats)
    }
    sample = learner.model.layers.attn.q_proj.kernel[...]  # every layer's (stacked)

    from spade_jax.infra.hosts import Hosts
    from spade_jax.model.placement import local_replica

    hosts = Hosts.current()  # each process maps its block of 5 items; both get all 5 back, in order
    mapped = hosts.map(list(range(5)), lambda block: [[x, jax.process_index(), "x" * 1000 * x] for x in block])
    replica = local_replica(learner.model, make_mesh({"data": -1}, devices=jax.local_devices()))
    whole = np.asarray(replica.layers.attn.q_proj.kernel[...])  # the sampler's copy: whole on this process
    out = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "info": [info.process_id, info.num_processes],
        "global_devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
        "fully_addressable": bool(sample.is_fully_addressable),
        "loss": [m["loss"] for m in metrics],
        "grad_norm": [m["grad_norm"] for m in metrics],
        "checksums": checksums,
        "mapped": [[x, p, len(pad)] for x, p, pad in mapped],
        "replica_checksum": [float(whole.sum()), float((whole * whole).sum())],
        "q_proj_checksum": checksums["layers.attn.q_proj.kernel"][:2],
    }
    print("RESULTS " + json.dumps(out), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPADE_")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return dict(
        env,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]),
        **extra,
    )


def _results(proc_out: str, proc_err: str, rc: int) -> dict:
    line = next((ln for ln in proc_out.splitlines() if ln.startswith("RESULTS ")), None)
    assert rc == 0 and line, f"worker failed (rc={rc}):\n{proc_out[-3000:]}\n{proc_err[-3000:]}"
    return json.loads(line[len("RESULTS ") :])


@pytest.fixture(scope="module")
def runs() -> tuple[list[dict], dict]:
    port = _free_port()
    cmd = [sys.executable, __file__, "--worker"]
    procs = [
        subprocess.Popen(
            cmd,
            env=_env(
                DEVICES_PER_PROCESS,
                SPADE_COORDINATOR=f"127.0.0.1:{port}",
                SPADE_NUM_PROCESSES=str(PROCESSES),
                SPADE_PROCESS_ID=str(i),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    multi = [_results(o, e, p.returncode) for (o, e), p in zip(outs, procs)]
    single = subprocess.run(
        cmd, env=_env(PROCESSES * DEVICES_PER_PROCESS), capture_output=True, text=True, timeout=600
    )  # fmt: skip
    return multi, _results(single.stdout, single.stderr, single.returncode)


@pytest.mark.slow
def test_two_processes_form_one_job(runs) -> None:
    multi, single = runs
    for i, r in enumerate(multi):
        assert r["process_index"] == i and r["process_count"] == PROCESSES and r["info"] == [i, PROCESSES]
        assert r["global_devices"] == PROCESSES * DEVICES_PER_PROCESS and r["local_devices"] == DEVICES_PER_PROCESS
        assert not r["fully_addressable"]  # parameters really span both processes
    assert single["process_count"] == 1 and single["global_devices"] == PROCESSES * DEVICES_PER_PROCESS
    assert single["fully_addressable"]


@pytest.mark.slow
def test_sharded_step_matches_single_process(runs) -> None:
    multi, single = runs
    for r in multi:  # every process sees the same global results
        print(f"process {r['process_index']}: loss {r['loss']} vs {single['loss']}")
        assert r["loss"] == pytest.approx(single["loss"], abs=1e-6)
        assert r["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-5)
        assert r["checksums"].keys() == single["checksums"].keys()
        for name, got in r["checksums"].items():
            assert got == pytest.approx(single["checksums"][name], rel=1e-5, abs=1e-5), name
    assert multi[0]["loss"][0] != multi[0]["loss"][1]  # the first step changed the parameters


@pytest.mark.slow
def test_hosts_divide_a_list_and_every_process_gets_all_results(runs) -> None:
    multi, single = runs
    want = [[0, 0, 0], [1, 0, 1000], [2, 1, 2000], [3, 1, 3000], [4, 1, 4000]]  # blocks [0, 2) and [2, 5)
    assert [r["mapped"] for r in multi] == [want, want]
    assert single["mapped"] == [[x, 0, 1000 * x] for x in range(5)]
    for r in multi:  # the sampler's replica holds the learner's sharded parameters whole
        assert r["replica_checksum"] == pytest.approx(r["q_proj_checksum"], rel=1e-5)


def test_process_info_from_env() -> None:
    from spade_jax.infra.distributed import process_info_from_env

    info = process_info_from_env(
        {"SPADE_COORDINATOR": "10.0.0.1:8476", "SPADE_NUM_PROCESSES": "4", "SPADE_PROCESS_ID": "3"}
    )
    assert (info.process_id, info.num_processes, info.coordinator, info.is_leader) == (3, 4, "10.0.0.1:8476", False)
    slurm = process_info_from_env({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"})
    assert (slurm.process_id, slurm.num_processes, slurm.coordinator) == (1, 2, None)
    assert process_info_from_env({}).num_processes == 1 and process_info_from_env({}).is_leader


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker()
