"""Sizes as people read them: binary units (KiB, MiB, GiB), the units ``status``, ``tune``,
``explain``, ``vacuum`` and the compactor's progress lines all print, so that one table's numbers
agree wherever they are shown. JSON output keeps the raw byte counts."""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 KiB``, ... ``2.0 TiB``."""
    for unit in UNITS:
        if abs(n) < 1024 or unit == UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def human_duration(seconds: float) -> str:
    """A span of time in its largest whole unit: ``45 s``, ``10.0 min``, ``2.5 h``, ``7.0 d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def mebibytes(n: float) -> float:
    """``n`` bytes in MiB, for a plot's axis (one unit along the whole axis)."""
    return n / 2**20
