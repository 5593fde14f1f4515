"""`python -m orchestrator.cli ...` is `orch ...` (tests and benchmarks start orch this way, with this interpreter)."""

from orchestrator.cli.app import main

main()
