"""Host-pool benchmark: sandbox start latency, step round trip, episode throughput vs in-process `exec`.

Prints, for every sandbox level that works here:
  * worker start latency (launch until the worker is ready),
  * step round-trip latency p50 / p99 (a trivial step, so this is pure overhead),
  * episodes per second for a 10-step environment with 1, 2, 4 and 8 workers (open + reset + 10 steps +
    close), for a trivial step and for a step doing ~5 ms of pure-Python work, and the ratio against
    running the same episodes in-process with `exec` (the reference implementation's approach),
  * many sessions in flight (`--flight 32x1,32x8`: workers x sessions per worker): episodes per second with that
    many episodes live at once (one thread each, trivial steps), and the memory per in-flight episode with all of
    them open (the sandboxes' cgroups, i.e. everything charged to them, and the PSS of their host processes),
    one session per worker side by side with several.
Usage: python benchmarks/host_pool.py [--levels gvisor,bwrap,process] [--seconds 2.0] [--flight 32x1,32x8]
       [--only-flight]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spade_jax.sandbox.host_pool import HostPool  # noqa: E402
from spade_jax.sandbox.launchers import Launcher, SandboxConfig, SandboxUnavailable, detect_level, start_worker  # noqa: E402

ENV = """
class Bench:
    def __init__(self, work=0, max_turns=10):
        self.work, self.max_turns = work, max_turns

    def reset(self, seed=None):
        self.t, self.acc = 0, seed or 0
        return "start", {"seed": seed}

    def step(self, action):
        self.t += 1
        x = self.acc
        for i in range(self.work):  # pure-Python work, no syscalls
            x = (x * 1103515245 + 12345 + i) % 2147483648
        self.acc = x
        return f"t={self.t} acc={x}", 0.0, self.t >= self.max_turns, False, {"t": self.t}
"""
STEPS = 10


def calibrate() -> int:
    ns: dict = {}
    exec(ENV, ns)
    env = ns["Bench"](work=20000)
    env.reset(0)
    t0 = time.perf_counter()
    for _ in range(5):
        env.step("a")
    per = (time.perf_counter() - t0) / 5
    return max(1000, int(20000 * 0.005 / per))


def in_process_episode(work: int, seed: int) -> None:
    ns: dict = {"__name__": "env"}
    exec(compile(ENV, "env", "exec"), ns)  # the reference's way: exec the code in the trainer process
    env = ns["Bench"](work=work, max_turns=STEPS)
    env.reset(seed)
    for _ in range(STEPS):
        env.step("go")


def pool_episode(pool: HostPool, work: int, seed: int) -> bool:
    with pool.open(ENV, env_kwargs={"work": work, "max_turns": STEPS}) as s:
        ok = s.load_result.ok and s.reset(seed).ok
        for _ in range(STEPS):
            ok = s.step("go").ok and ok
    return ok


def rate(fn, seconds: float, min_n: int, batch: int = 1) -> float:
    """Episodes per second of fn(i) (which runs `batch` episodes), measured for about `seconds`."""
    n, t0 = 0, time.perf_counter()
    while n < min_n or time.perf_counter() - t0 < seconds:
        fn(n)
        n += batch
    return n / (time.perf_counter() - t0)


def start_latency(level: str, n: int = 5) -> list[float]:
    launcher = Launcher(SandboxConfig(level=level), level)
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            proc, _ = start_worker(launcher)
            out.append(time.perf_counter() - t0)
            proc.kill()
    finally:
        launcher.close()
    return out


def step_latency(level: str, n: int = 400) -> list[float]:
    with HostPool(1, SandboxConfig(level=level)) as pool, pool.open(ENV, env_kwargs={"max_turns": 10**9}) as s:
        s.reset(0)
        for _ in range(20):
            s.step("warm")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            s.step("go")
            out.append(time.perf_counter() - t0)
    return out


def _tree(root: int) -> set[int]:
    """`root` and every process below it (host pids)."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent[int(name)] = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def sandbox_memory(pool: HostPool) -> tuple[float, float]:
    """(MB charged to the sandboxes' cgroups, MB of PSS of their host processes), summed over the live workers."""
    cgroup = pss = 0.0
    for w in list(pool._live):
        if w.proc.cgroup is not None:
            cgroup += w.proc.cgroup.usage_mb()
        pss += sum(_pss_mb(p) for p in _tree(w.proc.popen.pid))
    return cgroup, pss


def flight(level: str, workers: int, per_worker: int, seconds: float) -> dict:
    """Episodes per second with workers x per_worker episodes live at once (each thread starts episodes until
    `seconds` have passed and finishes the one it is in: the time counted includes that tail), and memory with
    all of them open."""
    n = workers * per_worker
    with HostPool(workers, SandboxConfig(level=level), sessions_per_worker=per_worker) as pool:
        pool.warm_up()
        idle = sandbox_memory(pool)
        t0 = time.perf_counter()
        sessions = pool.map(lambda i: pool.open(ENV, env_kwargs={"max_turns": 10**9}), range(n))
        opened = sum(pool.map(lambda s: s.load_result.ok and s.reset(0).ok and s.step("go").ok, sessions))
        open_s = time.perf_counter() - t0
        live = sandbox_memory(pool)
        for s in sessions:
            s.close()
        done, failed, stop = [0] * n, [0] * n, time.perf_counter() + seconds

        def loop(i: int) -> None:
            while time.perf_counter() < stop:
                if pool_episode(pool, 0, i):
                    done[i] += 1
                else:
                    failed[i] += 1

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    return {"n": n, "opened": opened, "open_s": open_s, "ep_s": sum(done) / elapsed, "failed": sum(failed),
            "idle": idle, "live": live}  # fmt: skip


def print_flight(levels: list[str], shapes: list[tuple[int, int]], seconds: float) -> None:
    print("\n== many sessions in flight (workers x sessions per worker; trivial steps; memory with all open) ==")
    print(f"{'level':8} {'shape':>7} {'in flight':>9} {'open all':>9} {'ep/s':>7} {'failed':>6} {'cgroup MB':>10} "
          f"{'per ep':>7} {'PSS MB':>8} {'per ep':>7} {'idle cgroup MB':>15}")  # fmt: skip
    for lv in levels:
        for w, k in shapes:
            r = flight(lv, w, k, seconds)
            (cg, pss), (cg0, _) = r["live"], r["idle"]
            note = "" if r["opened"] == r["n"] else f"  ({r['n'] - r['opened']} did not open)"
            print(f"{lv:8} {f'{w}x{k}':>7} {r['n']:9d} {r['open_s']:8.1f}s {r['ep_s']:7.1f} {r['failed']:6d} "
                  f"{cg:10.0f} {cg / r['n']:7.1f} {pss:8.0f} {pss / r['n']:7.1f} {cg0:15.0f}{note}",
                  flush=True)  # fmt: skip


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="gvisor,bwrap,process")
    ap.add_argument("--seconds", type=float, default=1.5, help="time per throughput measurement")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--flight", default="32x1,32x8", help="workers x sessions per worker, comma separated")
    ap.add_argument("--only-flight", action="store_true", help="only the many-sessions-in-flight run")
    args = ap.parse_args()
    levels = []
    for lv in args.levels.split(","):
        if lv in ("gvisor", "bwrap") and not shutil.which({"gvisor": "runsc", "bwrap": "bwrap"}[lv]):
            print(f"{lv}: runtime not installed, skipped")
            continue
        try:
            levels.append(detect_level(lv))
        except SandboxUnavailable as e:
            print(f"{lv}: unavailable ({e}), skipped")
    shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.flight.split(",") if shape]
    if args.only_flight:
        print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; episode = open + reset + "
              f"{STEPS} steps + close")  # fmt: skip
        print_flight(levels, shapes, args.seconds)
        return 0
    work = calibrate()
    print(
        f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; 'work' step = {work} loop iterations "
        f"(~5 ms in-process); episode = open + reset + {STEPS} steps + close"
    )
    print("\n== worker start latency and step round trip ==")
    print(f"{'level':8} {'start median':>13} {'start max':>10} {'step p50':>9} {'step p99':>9}")
    for lv in levels:
        st, sl = start_latency(lv), step_latency(lv)
        print(f"{lv:8} {statistics.median(st) * 1e3:10.1f} ms {max(st) * 1e3:7.1f} ms "
              f"{pct(sl, 0.5) * 1e3:6.2f} ms {pct(sl, 0.99) * 1e3:6.2f} ms", flush=True)  # fmt: skip
    base = {w: rate(lambda i, w=w: in_process_episode(w, i), args.seconds, 5) for w in (0, work)}
    print("\n== episodes per second (ratio = pool / in-process exec, single trainer process) ==")
    print(f"in-process exec: trivial step {base[0]:8.1f} ep/s   5 ms step {base[work]:6.2f} ep/s")
    counts = [int(x) for x in args.workers.split(",")]
    print(f"{'level':8} {'workers':>7} {'trivial ep/s':>13} {'ratio':>7} {'5ms-step ep/s':>14} {'ratio':>7}")
    for lv in levels:
        for n in counts:
            with HostPool(n, SandboxConfig(level=lv)) as pool:
                pool.warm_up()
                row = []
                for w in (0, work):
                    pool_episode(pool, w, 0)

                    def batch(i: int, w: int = w, n: int = n) -> None:
                        pool.map(lambda k: pool_episode(pool, w, i + k), range(n))

                    r = rate(batch, args.seconds, n, batch=n)
                    row += [r, r / base[w]]
            print(f"{lv:8} {n:7d} {row[0]:13.1f} {row[1]:7.2f} {row[2]:14.2f} {row[3]:7.2f}", flush=True)
    print_flight(levels, shapes, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
