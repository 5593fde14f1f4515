"""Which sites have a passing probe for their current profile (``site_probes``, migration 0009).

``orch plan`` calls :func:`probe_warnings` for the sites of its runs and ``orch sites show``
:func:`latest_probe`; the probe itself is submitted and judged by ``orchestrator/run/probe.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import Select, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import UserError
from orchestrator.results.db.models import SiteProbe
from orchestrator.sites.fingerprint import Fingerprint, fingerprint
from orchestrator.sites.launchers import get_launcher
from orchestrator.sites.profiles import load_site
from orchestrator.sites.vendors.base import VendorRunner
from orchestrator.states import ProbeState

# The embedded default (this machine): nothing to prove before a campaign there, so no warning;
# it can still be probed.
UNPROBED_SITES = frozenset({"local"})


def database_exists(url: str) -> bool:
    """False only for a SQLite file that is not there yet: a command that merely reads (``orch
    sites show``) then says "no probe" instead of creating the database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return True
    return Path(parsed.database).expanduser().exists()


def _of(fp: Fingerprint) -> Select[SiteProbe]:
    query = select(SiteProbe).where(SiteProbe.site == fp.site, SiteProbe.state == ProbeState.FINISHED)
    return query.where(SiteProbe.system == fp.system) if fp.system else query.where(SiteProbe.system.is_(None))


def latest_probe(session: Session, fp: Fingerprint, passed: bool | None = None,
                 any_profile: bool = False) -> SiteProbe | None:
    """The newest finished probe of the profile ``fp`` is (of any version with ``any_profile``),
    passing or failing, or only those with ``passed``."""
    query = _of(fp)
    if not any_profile:
        query = query.where(SiteProbe.profile_hash == fp.sha256)
    if passed is not None:
        query = query.where(SiteProbe.passed.is_(passed))
    return session.scalars(query.order_by(SiteProbe.id.desc()).limit(1)).first()


def _probe_runs_there(target: str, sites_dirs: list[Path] | None) -> bool:
    """False where a vendor's runner starts every run (no PyTorch program runs, so no probe can)."""
    try:
        return not isinstance(get_launcher(load_site(target, sites_dirs).launcher.name), VendorRunner)
    except (KeyError, UserError):
        return True


@dataclass(frozen=True)
class ProbeWarning:
    """A site of a plan whose current profile has no passing probe (shaped as the plan's lints)."""

    site: str  # site or site:system
    path: str  # its profile
    message: str

    def text(self) -> str:
        return f"warning: {self.site}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"severity": "warning", "check": "probe", "site": self.site, "path": self.path, "line": None,
                "field": "probe", "message": self.message}


def probe_warnings(sessions: sessionmaker[Session], targets: Iterable[str],
                   sites_dirs: list[Path] | None = None) -> list[ProbeWarning]:
    """One per site (``site`` or ``site:system``) whose current profile has no passing probe,
    saying why (never probed, the last probe failed, the profile changed) and what to run."""
    warnings: list[ProbeWarning] = []
    with sessions() as session:
        for target in sorted(set(targets)):
            if target.partition(":")[0] in UNPROBED_SITES or not _probe_runs_there(target, sites_dirs):
                continue
            fp = fingerprint(target, sites_dirs)
            if latest_probe(session, fp, passed=True) is not None:
                continue
            failed = latest_probe(session, fp)
            older = latest_probe(session, fp, passed=True, any_profile=True)
            if failed is not None:
                why = f"its last probe (#{failed.id}) failed: {failed.failed_checks}"
            elif older is not None:
                why = f"{fp.path.name} changed since its last passing probe (#{older.id})"
            else:
                why = "it was never probed"
            warnings.append(ProbeWarning(target, str(fp.path), f"no passing probe for its current profile ({why}): "
                                                               f"run `orch sites probe {target}` before submitting"))
    return warnings
