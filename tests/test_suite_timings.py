"""The suite's own timings (`tests/durations.json`), which order the full run and pick `make test-fast`'s tests:
`scripts/test_durations.py` names tests as pytest does, and a test listed as slow is left out of the fast set."""

from __future__ import annotations

import json

from scripts.test_durations import durations, node_id
from tests.conftest import DURATIONS, FAST_FILE_S, FAST_TEST_S, recorded_slow

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.test_a" name="test_one[x-1]" time="2.5"/>
  <testcase classname="tests.test_a" name="test_two" time="0.01"/>
  <testcase classname="tests.test_b.TestThing" name="test_three" time="0.75"/>
</testsuite></testsuites>
"""


def test_node_ids_are_pytests():
    assert node_id("tests.test_a", "test_one[x-1]") == ("tests/test_a.py", "tests/test_a.py::test_one[x-1]")
    assert node_id("tests.test_b.TestThing", "test_three") == (
        "tests/test_b.py",
        "tests/test_b.py::TestThing::test_three",
    )


def test_a_junit_file_becomes_seconds_per_file_and_per_slow_test(tmp_path):
    xml = tmp_path / "run.xml"
    xml.write_text(JUNIT, encoding="utf-8")
    d = durations(xml)
    assert d["files"] == {"test_a.py": 2.5, "test_b.py": 0.8}
    assert d["tests"] == {"tests/test_a.py::test_one[x-1]": 2.5, "tests/test_b.py::TestThing::test_three": 0.75}


def test_the_fast_set_leaves_out_the_recorded_slow_tests_and_files():
    recorded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    assert len(recorded["files"]) >= 90 and recorded["tests"]
    slow_test = next(n for n, s in recorded["tests"].items() if s >= FAST_TEST_S)
    quick_test = next(n for n, s in recorded["tests"].items() if s < FAST_TEST_S)
    big_file = next(f for f, s in recorded["files"].items() if s > FAST_FILE_S)
    small_file = next(f for f, s in recorded["files"].items() if s <= FAST_FILE_S)
    assert recorded_slow(slow_test, recorded)
    assert recorded_slow(f"tests/{big_file}::test_anything", recorded)
    assert not recorded_slow(f"tests/{small_file}::test_not_listed", recorded)
    in_small_file = recorded["files"].get(quick_test.split("::")[0].rsplit("/", 1)[-1], 0.0) <= FAST_FILE_S
    assert recorded_slow(quick_test, recorded) is not in_small_file
