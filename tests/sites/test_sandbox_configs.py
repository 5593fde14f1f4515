"""The sandbox cluster's configuration files, byte for byte, against golden files.

The files orch writes under /etc/slurm (slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf, a
twin's plugstack.conf) are Jinja templates in ``templates/sandbox/``, filled by
:mod:`orchestrator.sites.sandbox.configs`. Slurm reads them, and ``up()`` restarts every daemon
when one changes, so a template edit must change exactly what it means to. This test renders
each file for the plain sandbox and for twins of Slurm sites (with and without the account
and QoS variables, and a made-up layout that reaches the branches no profile does), in both
memory modes, and compares it with ``tests/sites/golden/sandbox/``. The goldens were first
written by the code that built these files as Python strings, before the templates.

The host is made up (hostname, CPUs, memory, a C compiler), so the texts are the same on any
machine; nothing here needs root, Slurm or the network.

Regenerate the golden files after an intended change with
``ORCH_UPDATE_GOLDEN=1 pytest tests/sites/test_sandbox_configs.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
import pytest

from orchestrator.sites.sandbox import configs, facts
from orchestrator.sites.sandbox.layout import TwinLayout, plain_layout, twin_layout

GOLDEN = Path(__file__).resolve().parent / "golden" / "sandbox"
UPDATE = os.environ.get("ORCH_UPDATE_GOLDEN") == "1"

MODES = ("cgroup", "jobacct")
ENV = {"ORCH_ACCOUNT": "twinproj", "ORCH_QOS": "twinqos"}
# Every Slurm site of sites/ (the twins tests/slurm/test_twins.py brings up).
TWIN_SITES = ["baskerville", "dawn", "cosma8", "stanage", "jade2", "alcf-ai-testbed", "perlmutter", "lumi",
              "dgx", "gaudi2-cluster", "graphcore-pod16"]
# Sites whose twin takes stand-ins when the environment names no account or QoS.
NO_ENV_SITES = ["stanage", "baskerville"]
# Branches no site profile reaches: a 1-device file gres on a 1-node group, a group without gres
# and one with an empty description, a partition over two groups without MaxNodes but with a
# partition QoS and AllowQos, gres that count files besides gpu (mps, nic), --ipus.
SYNTHETIC = {
    "twin": "synthetic", "targets": ["synthetic", "synthetic:b"], "ipus_max": 4,
    "groups": [
        {"label": "synthetic", "first": 1, "count": 1, "cpus": 4, "memory_mb": 8192, "gres": {"gpu": 1, "rdu": 2},
         "features": ["x", "y"], "describe": "one node"},
        {"label": "synthetic:b", "first": 2, "count": 3, "cpus": 6, "memory_mb": 6000, "gres": {},
         "features": [], "describe": "cpu nodes"},
        {"label": "synthetic:c", "first": 5, "count": 2, "cpus": 2, "memory_mb": 4096, "gres": {"mps": 3, "nic": 1},
         "features": [], "describe": ""},
    ],
    "partitions": [
        {"name": "both", "groups": ["synthetic", "synthetic:b"], "default": False, "max_time": "UNLIMITED",
         "default_time": None, "max_nodes": None, "min_nodes": 2, "qos": "orch-twin-part-both",
         "allow_qos": ["a", "b"], "site_queue": "both", "implicit": False},
        {"name": "site-default", "groups": ["synthetic:c"], "default": True, "max_time": "00:10:00",
         "default_time": None, "max_nodes": 2, "min_nodes": 1, "qos": None, "allow_qos": [],
         "site_queue": "default", "implicit": True},
    ],
    "accounts": ["acct"], "qos": ["a", "b"],
    "partition_qos": [{"name": "orch-twin-part-both", "max_tres_per_job": "gres/gpu=1", "max_jobs_per_user": 2,
                       "max_submit_per_user": None}],
    "no_twin": {"synthetic:pbs": "PBS"}, "notes": ["a note"],
}
LAYOUTS = ["plain", *TWIN_SITES, *(f"{s}-no-env" for s in NO_ENV_SITES), "synthetic"]


@pytest.fixture(autouse=True)
def made_up_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host facts every text depends on, fixed (the package reads them through ``facts``)."""
    monkeypatch.setattr(facts, "_hostname", lambda: "orchhost")
    monkeypatch.setattr(facts, "_cpus_per_node", lambda: 8)
    monkeypatch.setattr(facts, "_host_mem_mb", lambda: 65536)
    monkeypatch.setattr(facts, "_c_compiler", lambda: "/usr/bin/cc")  # the Graphcore twin loads --ipus
    monkeypatch.delenv("ORCH_SITES_PATH", raising=False)  # only the built-in site profiles
    monkeypatch.delenv("ORCH_SANDBOX_MEMORY", raising=False)


def layout_of(name: str) -> TwinLayout:
    if name == "plain":
        return plain_layout()
    if name == "synthetic":
        return TwinLayout.from_dict(SYNTHETIC)
    if name.endswith("-no-env"):
        return twin_layout(name.removesuffix("-no-env"), env={})
    return twin_layout(name, env=ENV)


def check(golden: Path, text: str | None) -> None:
    """``text`` is the golden file's content (None: no such file, as up() writes none)."""
    if UPDATE:
        if text is None:
            golden.unlink(missing_ok=True)
        else:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
    if text is None:
        assert not golden.exists(), f"{golden} exists, but nothing is rendered (ORCH_UPDATE_GOLDEN=1 removes it)"
        return
    assert golden.exists(), f"no golden file {golden}: run with ORCH_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{golden} differs (ORCH_UPDATE_GOLDEN=1 regenerates it)"


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout(name: str) -> None:
    """The values the templates are filled with (a change here shows before the texts do)."""
    check(GOLDEN / "layouts" / name / "layout.json", layout_of(name).to_json() + "\n")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LAYOUTS)
def test_slurm_conf(name: str, mode: str) -> None:
    check(GOLDEN / "layouts" / name / f"slurm.{mode}.conf", configs._slurm_conf(mode, layout_of(name)))


@pytest.mark.parametrize("name", LAYOUTS)
def test_gres_and_plugstack_conf(name: str) -> None:
    layout = layout_of(name)
    check(GOLDEN / "layouts" / name / "gres.conf", configs._gres_conf(layout))
    check(GOLDEN / "layouts" / name / "plugstack.conf", configs._plugstack_conf(layout))


@pytest.mark.parametrize("mode", MODES)
def test_memory_mode_texts(mode: str) -> None:
    """cgroup.conf, and the slurm.conf fragments the memory mode decides."""
    check(GOLDEN / "modes" / mode / "cgroup.conf", configs._cgroup_conf(mode))
    check(GOLDEN / "modes" / mode / "acct_gather.conf", configs._acct_gather_conf(mode))
    check(GOLDEN / "modes" / mode / "plugins.conf", configs._plugins_conf(mode))


def test_slurmdbd_conf() -> None:
    check(GOLDEN / "slurmdbd.conf", configs._dbd_conf())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["plain", "graphcore-pod16", "stanage"])
def test_up_writes_the_texts_checked_here(name: str, mode: str) -> None:
    """``_config_files`` (what up() writes, and compares with the disk) is made of these texts."""
    layout = layout_of(name)
    assert configs._config_files(mode, layout) == {
        facts.SLURM_CONF: configs._slurm_conf(mode, layout),
        facts.GRES_CONF: configs._gres_conf(layout),
        facts.CGROUP_CONF: configs._cgroup_conf(mode),
        facts.PLUGSTACK_CONF: configs._plugstack_conf(layout),
    }
    assert configs._slurm_conf(mode) == configs._slurm_conf(mode, plain_layout())
    assert configs._gres_conf() == configs._gres_conf(plain_layout())


def test_no_stale_golden_files() -> None:
    expected = {Path("slurmdbd.conf")}
    expected |= {Path("modes", m, f) for m in MODES for f in ("cgroup.conf", "acct_gather.conf", "plugins.conf")}
    for name in LAYOUTS:
        expected |= {Path("layouts", name, f) for f in ("layout.json", "gres.conf")}
        expected |= {Path("layouts", name, f"slurm.{m}.conf") for m in MODES}
        if layout_of(name).ipus_max:
            expected.add(Path("layouts", name, "plugstack.conf"))
    found = {p.relative_to(GOLDEN) for p in GOLDEN.rglob("*") if p.is_file()}
    assert found == expected


def test_templates_refuse_what_the_code_did_not_set() -> None:
    """StrictUndefined and the None check: a forgotten value fails instead of writing a bad file."""
    with pytest.raises(jinja2.UndefinedError):
        configs._render("slurmdbd.conf.j2", dbd_port=6819)
    with pytest.raises(ValueError, match="printed None"):
        configs._render("plugstack.conf.j2", plugin="/x.so", ipus_max=None)
