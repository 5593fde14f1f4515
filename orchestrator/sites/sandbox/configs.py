"""The sandbox's configuration files: Python computes their values, Jinja templates lay them out.

Each file orch writes for Slurm (slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf, the
twin's plugstack.conf) is a template in ``templates/sandbox/``, found through
:func:`orchestrator.paths.templates_dir` like the batch-script templates (and shipped in the
wheel with them). The functions here gather what a file needs (the layout's nodes and
partitions, the memory mode, the paths and ports of :mod:`.facts`) and render its template.
Undefined names and None values are errors, so a value the code forgot never reaches Slurm
as an empty field or the word ``None``.

``tests/sites/test_sandbox_configs.py`` compares every rendered text with golden files (the
plain sandbox and site twins, in both memory modes, on a made-up host): a template edit that
changes one byte of a file shows there.

Also here: whether the files on disk are the ones a layout wants (:func:`_configs_current`;
``up()`` restarts the daemons only when they are not), the atomic writer, and the stand-in
device files that gres.conf names.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Any

import jinja2

from orchestrator import paths
from orchestrator.escape import one_line
from orchestrator.sites.sandbox import facts
from orchestrator.sites.sandbox.facts import (
    CGROUP_CONF,
    CLUSTER,
    CONF_MARK,
    CTLD_LOG,
    CTLD_PID,
    CTLD_PORT,
    DB_NAME,
    DB_PASS,
    DB_USER,
    DBD_CONF,
    DBD_LOG,
    DBD_PID,
    DBD_PORT,
    ENFORCE,
    FAKE_GPU_FILES,
    FAKEDEV_DIR,
    GPUS_PER_NODE,
    GRES_CONF,
    LOG_DIR,
    MAX_ARRAY_SIZE,
    MAX_JOB_COUNT,
    NODE_SPEC,
    NODES,
    PARTITIONS,
    PLUGSTACK_CONF,
    RUN_DIR,
    SLURM_CONF,
    SLURMD_BASE_PORT,
    SPANK_DIR,
    STATE_DIR,
)
from orchestrator.sites.sandbox.layout import TwinLayout, active_layout, plain_layout

TEMPLATE_SUBDIR = "sandbox"  # templates/sandbox/


def _no_none(value: Any) -> Any:
    """Jinja's finalize: a None printed into a config file is a bug of the code, not a value.
    Every printed value stays on its line: a profile's value (a model name in a ``# comment``, a
    queue name) with a newline in it would otherwise start a live slurm.conf line."""
    if value is None:
        raise ValueError("a sandbox config template printed None (a value the code did not set)")
    return one_line(value) if isinstance(value, str) else value


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: it keeps the compiled templates, and the idempotent
    ``up()`` renders every file to compare it with the disk (that check takes well under a second)."""
    loader = jinja2.FileSystemLoader(str(paths.templates_dir() / TEMPLATE_SUBDIR))
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, finalize=_no_none,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)
    env.filters["repr"] = repr
    return env


def _render(template: str, **values: Any) -> str:
    """The text of ``templates/sandbox/<template>``; every template may print ``conf_mark``."""
    return _environment().get_template(template).render(conf_mark=CONF_MARK, **values)


def _plugins_conf(mode: str) -> str:
    """slurm.conf's process tracking and task plugins for the memory mode (plugins.conf.j2,
    which slurm.conf.j2 includes); like every slurm.conf fragment, without its last newline."""
    return _render("plugins.conf.j2", mode=mode).removesuffix("\n")


def _acct_gather_conf(mode: str) -> str:
    """slurm.conf's job accounting lines for the memory mode (acct_gather.conf.j2, which
    slurm.conf.j2 includes), without the last newline."""
    return _render("acct_gather.conf.j2", mode=mode).removesuffix("\n")


def _cgroup_conf(mode: str) -> str:
    """cgroup.conf: in mode "cgroup" it limits a step to its --mem (RAM and swap); in mode
    "jobacct" it only says that cgroups are not used."""
    return _render("cgroup.conf.j2", mode=mode)


def _plain_hardware() -> dict[str, Any]:
    """slurm.conf values of the plain sandbox: four nodes of this host's size, debug and batch."""
    cpus = facts._cpus_per_node()
    mem = facts._node_mem_mb()
    return {
        "def_mem_per_cpu": mem // cpus,
        "tres": ["gres/gpu"],
        "enforce": None,
        "node": {"spec": NODE_SPEC, "first_port": SLURMD_BASE_PORT, "last_port": SLURMD_BASE_PORT + len(NODES) - 1,
                 "cpus": cpus, "memory_mb": mem, "gpus": GPUS_PER_NODE},
        "partitions": [{"name": name, "default": is_default, "max_time": mx, "default_time": dflt}
                       for name, (mx, dflt, is_default) in PARTITIONS.items()],
    }


def _twin_hardware(layout: TwinLayout) -> dict[str, Any]:
    """slurm.conf values of a twin: the layout's node groups (one slurmd port each node) and
    partitions, every gres as a TRES, and the enforcement that makes it refuse what the site would."""
    gres_names = sorted({n for g in layout.groups for n in g.gres} | {"gpu"})
    groups = [{
        "label": g.label, "describe": g.describe, "spec": g.spec,
        "first_port": SLURMD_BASE_PORT + g.first - 1,
        "last_port": SLURMD_BASE_PORT + g.first + g.count - 2 if g.count > 1 else None,
        "cpus": g.cpus, "memory_mb": g.memory_mb, "gres": list(g.gres.items()), "features": list(g.features),
    } for g in layout.groups]
    partitions = [{
        "name": part.name, "nodes": [layout.group(label).spec for label in part.groups], "default": part.default,
        "max_time": part.max_time, "min_nodes": part.min_nodes,
        "def_mem_per_cpu": min(layout.group(label).memory_mb // layout.group(label).cpus for label in part.groups),
        "max_nodes": part.max_nodes, "qos": part.qos, "allow_qos": list(part.allow_qos),
        "implicit": part.implicit, "site_queue": part.site_queue,
    } for part in layout.partitions]
    return {
        "def_mem_per_cpu": min(g.memory_mb // g.cpus for g in layout.groups),
        "tres": ["gres/" + n for n in gres_names],
        "enforce": ENFORCE,
        "targets": list(layout.targets),
        "plugstack": PLUGSTACK_CONF if layout.ipus_max else None,
        "gres_types": gres_names,
        "groups": groups,
        "partitions": partitions,
    }


def _slurm_conf(mode: str | None = None, layout: TwinLayout | None = None) -> str:
    """slurm.conf for the memory mode (default: what this host allows) and the layout (default:
    the plain sandbox). The host's name and size enter through :mod:`.facts`."""
    mode = mode or facts._memory_mode()
    layout = layout or plain_layout()
    values: dict[str, Any] = {
        "mode": mode, "host": facts._hostname(), "cluster": CLUSTER, "twin": layout.twin,
        "ctld_port": CTLD_PORT, "dbd_port": DBD_PORT, "state_dir": STATE_DIR, "run_dir": RUN_DIR,
        "log_dir": LOG_DIR, "ctld_pid": CTLD_PID, "ctld_log": CTLD_LOG,
        "max_array_size": MAX_ARRAY_SIZE, "max_job_count": MAX_JOB_COUNT,
    }
    values.update(_plain_hardware() if layout.twin is None else _twin_hardware(layout))
    return _render("slurm.conf.j2", **values)


# gres whose plugin counts device files (a gres line without File leaves the node INVAL).
_FILE_GRES = ("gpu", "mps", "nic")


def _fake_device_files(count: int) -> list[str]:
    return [str(FAKEDEV_DIR / f"gpu{i}") for i in range(count)]


def _gres_conf(layout: TwinLayout | None = None) -> str:
    """gres.conf: the plain sandbox's four GPUs are four distinct /dev files; a twin's gres
    that count device files get stand-ins under FAKEDEV_DIR, the others a Count."""
    lines: list[dict[str, Any]] = []
    if layout is None or layout.twin is None:
        for f in FAKE_GPU_FILES[:GPUS_PER_NODE]:
            lines.append({"nodes": NODE_SPEC, "name": "gpu", "file": f, "count": None})
    else:
        for g in layout.groups:
            for name, count in g.gres.items():
                if name in _FILE_GRES:
                    files = f"{FAKEDEV_DIR}/gpu[0-{count - 1}]" if count > 1 else f"{FAKEDEV_DIR}/gpu0"
                    lines.append({"nodes": g.spec, "name": name, "file": files, "count": count})
                else:
                    lines.append({"nodes": g.spec, "name": name, "file": None, "count": count})
    return _render("gres.conf.j2", lines=lines)


def _ensure_fake_devices(layout: TwinLayout) -> None:
    """Distinct device files for the twin's gres (character devices like /dev/null where mknod is
    allowed; slurmd also counts plain files, logging that they are no devices)."""
    count = max((c for g in layout.groups for n, c in g.gres.items() if n in _FILE_GRES), default=0)
    if not count:
        return
    FAKEDEV_DIR.mkdir(parents=True, exist_ok=True)
    for path in map(Path, _fake_device_files(count)):
        if path.exists():
            continue
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            path.touch()


def _plugstack_conf(layout: TwinLayout) -> str | None:
    """The twin's SPANK stack (only a twin with --ipus has one; None: the file must not exist)."""
    if not layout.ipus_max:
        return None
    return _render("plugstack.conf.j2", plugin=SPANK_DIR / "orch_twin_ipus.so", ipus_max=layout.ipus_max)


def _dbd_conf() -> str:
    """slurmdbd.conf: the same for every layout (up() writes it with mode 0600: it holds the password)."""
    return _render("slurmdbd.conf.j2", dbd_port=DBD_PORT, log_file=DBD_LOG, pid_file=DBD_PID,
                   db_user=DB_USER, db_pass=DB_PASS, db_name=DB_NAME)


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    try:
        if path.read_text() == text:
            if (path.stat().st_mode & 0o777) != mode:
                path.chmod(mode)
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".orch-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def _config_files(mode: str, layout: TwinLayout) -> dict[Path, str | None]:
    """Every file up() writes for this layout (None: the file must not exist)."""
    return {
        SLURM_CONF: _slurm_conf(mode, layout),
        GRES_CONF: _gres_conf(layout),
        CGROUP_CONF: _cgroup_conf(mode),
        PLUGSTACK_CONF: _plugstack_conf(layout),
    }


def _configs_current(mode: str, layout: TwinLayout | None = None) -> bool:
    layout = layout or plain_layout()
    try:
        for path, text in _config_files(mode, layout).items():
            if text is None:
                if path.exists():
                    return False
            elif path.read_text() != text:
                return False
        return DBD_CONF.read_text() == _dbd_conf() and active_layout().to_json() == layout.to_json()
    except OSError:
        return False
