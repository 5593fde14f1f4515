"""What changed between the two sides of a change point: the provenance of the last epoch before
it set beside the first epoch after it (software and driver versions, node list, orch's version,
the site profile's hash, the code revision) and the lines of the rendered scripts that differ
(a module, an environment variable, a launcher flag)."""

from __future__ import annotations

import difflib

from orchestrator.results.regressions.history import Observation

_SHORT = {"profile_hash": 12, "code_revision": 12}  # hashes: their first characters say enough


def _values(rows: list[Observation], name: str) -> str:
    found = sorted({r.provenance[name] for r in rows if name in r.provenance})
    cut = _SHORT.get(name)
    return ", ".join(v[:cut] if cut else v for v in found) or "(none)"


def _script_lines(before: list[Observation], after: list[Observation], texts: dict[str, str]) -> list[str]:
    """The script lines removed (-) and added (+) from one epoch to the next, run by run, each once."""
    old = {r.run_id: r.script_hash for r in before}
    out: list[str] = []
    for row in after:
        was = old.get(row.run_id)
        if not (was and row.script_hash and was != row.script_hash and was in texts and row.script_hash in texts):
            continue
        for line in difflib.unified_diff(texts[was].splitlines(), texts[row.script_hash].splitlines(), lineterm="",
                                         n=0):
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip():
                text = f"script {line[0]} {line[1:].strip()}"
                if text not in out:
                    out.append(text)
    return out


def what_changed(before: list[Observation], after: list[Observation], texts: dict[str, str]) -> list[str]:
    """One line per difference ("torch: 2.12.0 -> 2.13.0", "script + export X=1"); empty when the
    provenance is the same on both sides (then the change is in what orch does not see)."""
    names = sorted({n for r in before + after for n in r.provenance})
    out = []
    for name in names:
        old, new = _values(before, name), _values(after, name)
        if old != new:
            out.append(f"{name}: {old} -> {new}")
    return out + _script_lines(before, after, texts)
