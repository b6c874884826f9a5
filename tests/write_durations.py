"""Write ``tests/durations.json`` (seconds per test file, longest first) from the output of a full
run with ``--durations=0``; ``tests/conftest.py`` orders the files by it for the workers.

    .venv/bin/python -m pytest -q --durations=0 > /tmp/run.log; .venv/bin/python tests/write_durations.py /tmp/run.log
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+?)::")


def main(log: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for line in Path(log).read_text().splitlines():
        if match := LINE.match(line):
            seconds[match.group(2)] += float(match.group(1))
    ordered = {name: round(s, 1) for name, s in sorted(seconds.items(), key=lambda item: -item[1])}
    Path(__file__).with_name("durations.json").write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"{len(ordered)} files, {sum(ordered.values()):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
