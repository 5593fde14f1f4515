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

The vendor modules are imported (hence registered) by :data:`orchestrator.sites.launchers.LAUNCHERS`
before its first lookup (it names them in ``VENDOR_MODULES``), never at this package's import:
the adapters are run as ``python -m orchestrator.sites.vendors.<vendor>`` and must not import
themselves twice. Their options (``launcher.options`` in a profile) are typed in
:mod:`orchestrator.sites.launcher_options`, which needs pydantic and so is not imported here.
"""

