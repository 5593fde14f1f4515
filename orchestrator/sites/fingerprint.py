"""Which version of a site's profile something was done with: a probe is valid for one.

A probe proves what a campaign depends on (``orch sites probe``) for the profile it was rendered
from; an edited profile (another Python, module line, launcher, queue) may break what it proved,
so the probe is stored with this hash and the plan asks for a probe of the current one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.sites.profiles import find_site_file
from orchestrator.yamlsource import load_yaml


@dataclass(frozen=True)
class Fingerprint:
    site: str
    system: str | None
    path: Path  # the YAML file the profile came from
    sha256: str

    @property
    def target(self) -> str:
        return f"{self.site}:{self.system}" if self.system else self.site


def fingerprint(target: str, sites_dirs: list[Path] | None = None) -> Fingerprint:
    """sha256 of the profile file's text and, for ``site:system``, of the system's override as
    well (the override lives in the same file; hashing it by name ties the hash to the system)."""
    site, _, system = target.partition(":")
    path = find_site_file(site, sites_dirs)
    text = path.read_text()
    digest = hashlib.sha256(text.encode())
    if system:
        data = load_yaml(path).data
        override = ((data.get("systems") or {}).get(system) if isinstance(data, dict) else None) or {}
        digest.update(b"\0system\0" + system.encode() + b"\0")
        digest.update(json.dumps(override, sort_keys=True, default=str).encode())
    return Fingerprint(site, system or None, path, digest.hexdigest())
