"""The ``appliance`` executor: a system with no batch scheduler for its users (the AI Testbed's
Cerebras CS-2, its Gaudi2 node), whose script runs on the machine orch runs on, the system's
login or user node (``templates/appliance.sh.j2``); the vendor's tool hands the work on to the
system where it has a scheduler of its own (Cerebras: the appliance's Kubernetes).

On that node it is the ``local`` executor: a job per run, admitted by cores, followed and
cancelled the same way; its options (:class:`orchestrator.sites.schedulers.ApplianceOptions`)
are local's.
"""

from __future__ import annotations

from orchestrator.run.executors.base import EXECUTORS
from orchestrator.run.executors.local import LocalExecutor
from orchestrator.sites.schedulers import ApplianceOptions


@EXECUTORS.register("appliance")
class ApplianceExecutor(LocalExecutor):
    """Runs the script on this node, as :class:`LocalExecutor` does."""

    options_model = ApplianceOptions
    options: ApplianceOptions
