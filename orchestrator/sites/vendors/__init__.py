"""Vendor runners: AI-accelerator systems programmed through the vendor's own tool.

One module per vendor, each a :class:`~orchestrator.sites.vendors.base.VendorRunner` registered as a
launcher (``launcher.name`` in the site profile) and an adapter run on the node as
``python -m orchestrator.sites.vendors.<vendor> --from vendor.log --output metrics.json ...``:

========== ================================ ==============================================
launcher   system                           vendor tool
========== ================================ ==============================================
cerebras   Cerebras CS-2                    model zoo ``run.py CSX --params ...``
sambaflow  SambaNova SN30                   SambaFlow app ``compile``, then ``run --pef``
poptorch   Graphcore Bow IPU (Bow-Pod64)    Graphcore examples (PopTorch, ``poprun``)
groqflow   GroqCard                         GroqFlow proof points (``groqit``)
========== ================================ ==============================================

Gaudi2 needs none: orch's own PyTorch workloads run on ``hpu``.

The command lines and the output formats are reproduced from the ALCF AI Testbed user guides
and the vendors' public examples; each module cites its pages and says what it could not verify.
No vendor hardware is reachable from orch's tests: the adapters are tested on the cited output
excerpts (tests/vendors/samples/), the command lines by rendering every example.

Standard library only (and ``workloads.registry``): the adapters run in the vendors' own
environments, without torch or orch's dependencies.
"""

from __future__ import annotations

import importlib

# The vendor modules, imported (hence registered) on first use, never at package import: the
# adapters are run as ``python -m orchestrator.sites.vendors.<vendor>`` and must not import themselves twice.
MODULES = ("cerebras", "sambanova", "graphcore", "groq")


def load() -> None:
    """Import every vendor module, registering its runner as a launcher."""
    for name in MODULES:
        importlib.import_module(f"orchestrator.sites.vendors.{name}")
