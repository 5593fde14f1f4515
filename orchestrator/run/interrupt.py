"""A Ctrl-C that cannot be lost.

Python turns SIGINT into a KeyboardInterrupt at the next bytecode of the main thread, wherever
that is. When it lands in a finalizer or a garbage-collection callback (SQLAlchemy has several),
the exception is printed as "Exception ignored in ..." and dropped, and a following command
carried on to exit 0 (issue 30: 2 of 17 trials). So the handler also counts each signal, and the
loops that wait (planning, submitting, following) call :meth:`Interrupts.check` at every step:
an interrupt swallowed on its way out is raised again there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Iterator


class Interrupts:
    """Counts SIGINTs; raises KeyboardInterrupt when one came, at the signal and at each check."""

    def __init__(self) -> None:
        self.count = 0

    def handler(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.count:
            raise KeyboardInterrupt


_current = Interrupts()  # checks outside a `watching()` block never raise


@contextlib.contextmanager
def watching() -> Iterator[Interrupts]:
    """Install the counting handler for the block (main thread only: elsewhere nothing changes)."""
    global _current
    if threading.current_thread() is not threading.main_thread():
        yield _current
        return
    state, outer = Interrupts(), _current
    previous = signal.signal(signal.SIGINT, state.handler)
    _current = state
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)
        _current = outer


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C came during the current `watching()` block."""
    _current.check()
