"""`Hosts`: the blocks of a list that the processes of a job take (the gathering itself runs on two real processes
in tests/test_distributed.py and tests/test_multihost_loop.py)."""

from __future__ import annotations

import pytest

from spade_jax import streams
from spade_jax.infra.hosts import Hosts


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16, 64])
@pytest.mark.parametrize("n", [0, 1, 5, 24, 768])
def test_blocks_cover_the_list_once_in_order_and_evenly(count: int, n: int) -> None:
    blocks = [Hosts(i, count).block(n) for i in range(count)]
    assert [i for b in blocks for i in b] == list(range(n))  # contiguous, in host order: gathering restores order
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1


def test_one_process_maps_the_whole_list_and_gathers_itself() -> None:
    hosts = Hosts()
    calls = []
    assert hosts.map([3, 1, 2], lambda xs: calls.append(list(xs)) or [x * 10 for x in xs]) == [30, 10, 20]
    assert calls == [[3, 1, 2]]
    assert hosts.map([], lambda xs: calls.append(xs) or []) == [] and len(calls) == 1  # not called on nothing
    assert hosts.gather({"a": 1}) == [{"a": 1}] and hosts.is_leader


def test_the_leader_keeps_the_run_seed_and_the_others_get_streams_of_it() -> None:
    assert Hosts(0, 4).seed(1234) == 1234  # a one-process run samples as before
    seeds = {Hosts(i, 4).seed(1234) for i in range(4)}
    assert len(seeds) == 4 and Hosts(2, 4).seed(1234) == streams.derive(1234, "host", 2)


@pytest.mark.parametrize(("index", "count"), [(2, 2), (-1, 2), (0, 0)])
def test_a_host_outside_the_job_is_refused(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="need 0 <= index < count"):
        Hosts(index, count)
