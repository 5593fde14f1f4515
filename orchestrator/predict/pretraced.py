"""Traces that ship with orch: the examples' shapes, so that a new user's first plan does not wait.

Why: a cold plan of an example traced its shapes on fake tensors first, 4 s of torch start-up and
up to 40 s of tracing (B4) against a 0.4 s plan without predictions (benchmarks/RESULTS.md,
"Memory predicted from the program"). ``scripts/pretrace.py`` plans every example (and the
``orch predict`` presets) with every site's account set, on an empty cache, and writes what the
cache then holds to ``pretraced.json`` beside this file: the disk cache's own keys, which hash the
traced inputs, the traced code, torch's version and ``memory.CACHE_VERSION``. Any change to the
traced code or torch changes every key, so a stale table serves nothing (those shapes are traced
again), never a number of other code. ``tests/unit/test_pretraced.py`` fails when the table no
longer covers the examples, and checks its entries against fresh traces.

No torch here: a plan whose shapes are all in the table never imports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("pretraced.json")
# "0": ignore the table (the build script, and benchmarks that time tracing itself).
ENV = "ORCH_PRETRACED"

_entries: dict[str, int] | None = None


def read(path: Path = TABLE) -> dict[str, Any]:
    """The table as stored: ``code`` (the code hash it was traced with), ``version``, ``entries``
    (key -> {"bytes", "inputs"}); an empty table where the file is missing or unreadable."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"code": None, "version": None, "entries": {}}
    return table if isinstance(table, dict) and isinstance(table.get("entries"), dict) else \
        {"code": None, "version": None, "entries": {}}


def lookup(key: str) -> int | None:
    """The shipped prediction under ``key`` (a disk-cache key), or None."""
    global _entries
    if os.environ.get(ENV) == "0":
        return None
    if _entries is None:
        _entries = {}
        for k, entry in read()["entries"].items():
            try:
                _entries[k] = int(entry["bytes"])
            except (KeyError, TypeError, ValueError):
                continue  # a damaged entry: that shape is traced instead
    return _entries.get(key)


def write(entries: dict[str, dict[str, Any]], code: str, version: int, path: Path = TABLE) -> None:
    """Store ``entries`` (key -> {"bytes", "inputs"}) traced with code hash ``code``: one entry a line,
    sorted, so that a rebuild's diff shows which shapes changed."""
    lines = [f"  {json.dumps(k)}: {json.dumps(entries[k], sort_keys=True)}" for k in sorted(entries)]
    text = ("{\n" f'"code": {json.dumps(code)},\n"version": {version},\n"entries": {{\n'
            + ",\n".join(lines) + "\n}}\n")
    json.loads(text)  # what is written must read back
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
