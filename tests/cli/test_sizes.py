"""Sizes in the commands' text output: binary units everywhere (KiB, MiB, GiB), raw bytes in JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lakecluster.cli import main
from lakecluster.sizes import human_bytes

DECIMAL_UNIT = re.compile(r"\d (kB|KB|MB|GB|TB)\b")


def test_human_bytes_uses_binary_units() -> None:
    assert [human_bytes(n) for n in (512, 1536, 128 << 20, 3 << 30)] == ["512 B", "1.5 KiB", "128.0 MiB", "3.0 GiB"]


def test_plan_and_explain_print_binary_units_and_json_keeps_bytes(
    ssb_table: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ["--set", f"table.path={ssb_table}", "--set", "compaction.min_input_files=2"]
    assert main([*table, "compact", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert main([*table, "explain", "--where", "s_city = 'UNITED KI1'"]) == 0
    explained = capsys.readouterr().out
    for text in (plan, explained):
        assert "KiB" in text and not DECIMAL_UNIT.search(text), text
    assert re.search(r"^table version \d+: 7 files, [\d.]+ KiB;", plan, re.M), plan
    assert main([*table, "--json", "explain", "--where", "s_city = 'UNITED KI1'"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data["bytes_total"], int) and f"{human_bytes(data['bytes_total'])} total" in explained
