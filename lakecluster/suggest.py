""""Did you mean": the nearest of the known names to a mistyped one (a config key, a column)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``word`` (case aside), or None when none is close."""
    names = list(known)
    folded = {n.lower(): n for n in names}
    if word.lower() in folded and folded[word.lower()] != word:
        return folded[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.6)
    return folded[match[0]] if match else None


def did_you_mean(word: str, known: Iterable[str], *, prefix: str = "") -> str:
    """``" (did you mean 'prefix+name'?)"`` for the nearest known name, or "" when none is close."""
    match = nearest(word, known)
    return f" (did you mean '{prefix}{match}'?)" if match else ""
