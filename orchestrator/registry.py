"""Named registries: launchers, vendor runners, executors and their option models, by name.

Registration is explicit and visible at the class, a decorator with the name::

    LAUNCHERS: Registry[type[Launcher]] = Registry("launcher", modules=("orchestrator.sites.vendors.groq",))

    @LAUNCHERS.register("srun")
    class SrunLauncher(Launcher): ...

A subclass that is not decorated is not registered (it never replaces its parent's entry); an
empty name, or a name already taken by another entry, is refused at once with both entries
named. ``modules`` are the modules (as import names) that hold further entries: every one is
imported before the first lookup or listing, so ``get``'s error always lists every valid name
and never an empty list. Naming them as strings keeps the registry's module from importing
them (they import it); a module being run as the program (``python -m``) is not imported a
second time.

Standard library only (and :mod:`orchestrator.errors`): the vendor adapters import launchers
on compute nodes that have nothing else.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Generic, Iterator, Sequence, TypeVar

from orchestrator.errors import UserError

T = TypeVar("T")


class RegistryError(UserError):
    """A registry was given a name it refuses, or asked for one it does not hold."""


class DuplicateName(RegistryError):
    """A name registered twice (or an empty name)."""


class UnknownName(RegistryError, KeyError):
    """No entry of that name; the message lists every valid one. A KeyError too, for callers
    that look names up as in a mapping."""

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""


def describe(obj: object) -> str:
    """``module.QualName`` of a class or function (what an error names an entry by)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if module and qualname:
        return f"{module}.{qualname}"
    return repr(obj)


class Registry(Generic[T]):
    """Entries of one kind by name.

    ``kind`` names the kind in errors ("launcher", "scheduler"); ``modules`` are imported (once,
    in order) before the first lookup or listing; ``name_attr``, when given, is set on each
    registered entry to its name (e.g. a launcher's ``name``), so that the name is written once,
    in the decorator.
    """

    def __init__(self, kind: str, modules: Sequence[str] = (), name_attr: str | None = None) -> None:
        self.kind = kind
        self.modules = tuple(modules)
        self.name_attr = name_attr
        self._entries: dict[str, T] = {}
        self._loaded = False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} registered)"

    # ------------------------------------------------------------------ registering
    def register(self, name: str) -> Callable[[T], T]:
        """Class (or function) decorator: register the decorated object as ``name``."""

        def decorate(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorate

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` as ``name``; an empty name or a name already taken is refused."""
        if not isinstance(name, str) or not name.strip():
            raise DuplicateName(f"{self.kind} {describe(obj)}: registered with an empty name {name!r}")
        existing = self._entries.get(name)
        if existing is not None and existing is not obj:
            raise DuplicateName(f"{self.kind} {name!r} registered twice: {describe(existing)} and {describe(obj)}")
        self._entries[name] = obj
        if self.name_attr:
            setattr(obj, self.name_attr, name)

    # ------------------------------------------------------------------ looking up
    def load(self) -> None:
        """Import every module named in ``modules`` (once), registering what they hold."""
        if self._loaded:
            return
        self._loaded = True  # set first: a module being imported may look names up itself
        main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
        for module in self.modules:
            if module == main:
                continue  # running as ``python -m module``: its entries are registered from __main__
            importlib.import_module(module)

    def get(self, name: str) -> T:
        """The entry called ``name``; UnknownName lists every valid name."""
        self.load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownName(f"unknown {self.kind} {name!r} (known: {', '.join(self.names())})") from None

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self.load()
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) for every entry, sorted by name."""
        return [(name, self._entries[name]) for name in self.names()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        self.load()
        return isinstance(name, str) and name in self._entries

    def __len__(self) -> int:
        self.load()
        return len(self._entries)
