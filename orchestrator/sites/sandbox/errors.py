"""The sandbox's one error, in a module of its own so that every other module can raise it."""

from __future__ import annotations

from orchestrator.errors import UserError


class SandboxError(UserError, RuntimeError):
    """The sandbox cluster could not be brought up (the message says what and shows logs).

    A UserError so that the CLI prints the message (and log tails) without a traceback.
    """

    exit_code = 1
