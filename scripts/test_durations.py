"""Refreshes `tests/durations.json` from a full test run's JUnit XML.

    make test PYTEST_ADDOPTS="--junitxml=/tmp/full.xml"
    python scripts/test_durations.py /tmp/full.xml

The file holds seconds per test file (the full suite runs the longest files first, so that both workers finish
together) and per test for every test that took at least `KEEP_S` (`make test-fast` leaves out the ones at or
above `tests/conftest.py`'s bound). A JUnit time includes the test's share of fixtures: the first test of a file
carries the module's pool or model, which is what `make test-fast` should leave out with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
KEEP_S = 0.25  # tests faster than this are not listed: an unlisted test counts as fast


def node_id(classname: str, name: str) -> tuple[str, str]:
    """('tests/test_x.py', 'tests/test_x.py::Class::test_y[p]') from JUnit's 'tests.test_x.Class' and 'test_y[p]'."""
    parts = classname.split(".")
    module = [p for p in parts if not p[:1].isupper()]
    classes = parts[len(module) :]
    path = "/".join(module) + ".py"
    return path, "::".join([path, *classes, name])


def durations(junit: Path) -> dict[str, dict[str, float]]:
    files: dict[str, float] = defaultdict(float)
    tests: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path, node = node_id(case.get("classname", ""), case.get("name", ""))
        seconds = float(case.get("time", 0.0))
        files[Path(path).name] += seconds
        if seconds >= KEEP_S:
            tests[node] = round(seconds, 2)
    order = lambda d: dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))  # noqa: E731
    return {"files": order({k: round(v, 1) for k, v in files.items()}), "tests": order(tests)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path, help="JUnit XML of a full `make test` run")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not args.junit.is_file():
        print(f"error: {args.junit} is not a file", file=sys.stderr)
        return 2
    data = durations(args.junit)
    if len(data["files"]) < 10:
        print(f"error: {args.junit} holds {len(data['files'])} test files: not a full run", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(data['files'])} files, {len(data['tests'])} tests of >= {KEEP_S} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
