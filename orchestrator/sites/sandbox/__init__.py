"""A real Slurm cluster on this one machine, for tests and for trying orch out.

``up()`` installs what is missing (Debian packages), writes the configuration
under ``/etc/slurm``, and starts munged, slurmdbd (on MariaDB), slurmctld and
four ``slurmd`` processes that play the virtual nodes ``n1``..``n4`` (each with
four fake GPUs as ``gres/gpu``). Afterwards ``sinfo``, ``sbatch``, ``srun``,
``sacct`` and ``scancel`` work from any shell. ``down()`` stops the Slurm daemons
and munged (MariaDB is left alone: other programs may use it); ``status()``
reports what runs without changing anything.

Site twins: ``up(like="dawn")`` reconfigures the same cluster as a twin of a site
profile (:func:`twin_layout`): the site's partitions (an ``implicit`` queue becomes
the twin's default partition) with the profile's MaxTime / MaxNodes / MinNodes,
device and job limits as a partition QoS (``Flags=DenyOnLimit``, so over-limit
jobs are refused at submission as on the site), the nodes' gres (``gpu``, ``rdu``,
...), CPUs, memory and features as the profile gives them (``SlurmdParameters=
config_overrides`` lets 4 slurmds on a 2-core host claim 144 CPUs and 512 GB), and
in slurmdbd the site's account (from the environment variable the profile names,
or a stand-in when that is unset and the site requires one) and QoS names, with
``AccountingStorageEnforce=associations,limits,qos``. Graphcore's ``--ipus`` is no
option of a stock Slurm; the twin loads a small SPANK plugin that adds it and
checks the count (see :data:`.spank.SPANK_IPUS_SOURCE`). ``up()`` without ``like``
restores the plain sandbox; ``status().twin`` says which twin is active.

Everything here needs root. The daemons outlive the Python process that started
them; ``up()`` is idempotent (a second call only checks, in well under a second).

Facts a site profile needs (``sites/sandbox.yaml``) are in :data:`FACTS`.

The package, bottom up (each module imports only those above it in this list):

- ``facts``: names, paths, ports and limits; the host probes (CPUs, memory, hostname).
- ``errors``: :class:`SandboxError`.
- ``layout``: what the cluster is configured as (:class:`TwinLayout`; the plain
  sandbox or :func:`twin_layout` of a site).
- ``configs``: the configuration files, rendered from ``templates/sandbox/*.j2``.
- ``proc``: commands, pid files, log tails.
- ``spank``: the ``--ipus`` SPANK plugin of a Graphcore twin.
- ``packages``, ``munge``, ``mariadb``: what Slurm stands on.
- ``daemons``: slurmdbd, slurmctld, the slurmds; ``accounting``: a twin's accounts and QoS.
- ``cluster``: :func:`up`, :func:`down`, :func:`status`, :func:`restart_controller`.

This module re-exports the public API; private helpers are used (and patched) where they live,
e.g. ``orchestrator.sites.sandbox.proc._run``.
"""

from __future__ import annotations

from orchestrator.sites.sandbox.cluster import SandboxStatus, down, restart_controller, status, up
from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import (
    CLUSTER,
    CONF_DIR,
    CTLD_PID,
    FACTS,
    SLURM_CONF,
    STAND_IN_ACCOUNT,
    STAND_IN_QOS,
    TWIN_MAX_NODES,
)
from orchestrator.sites.sandbox.layout import (
    NodeGroup,
    PartitionQos,
    PartitionSpec,
    TwinLayout,
    active_layout,
    plain_layout,
    site_targets,
    twin_layout,
)

__all__ = [
    "CLUSTER",
    "CONF_DIR",
    "CTLD_PID",
    "FACTS",
    "SLURM_CONF",
    "STAND_IN_ACCOUNT",
    "STAND_IN_QOS",
    "TWIN_MAX_NODES",
    "NodeGroup",
    "PartitionQos",
    "PartitionSpec",
    "SandboxError",
    "SandboxStatus",
    "TwinLayout",
    "active_layout",
    "down",
    "plain_layout",
    "restart_controller",
    "site_targets",
    "status",
    "twin_layout",
    "up",
]
