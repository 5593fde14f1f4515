"""What the typed option models share: the base model (no undeclared key) and the one-line
account of the first problem of a mapping given as options.

The models themselves: executor options per scheduler in :mod:`orchestrator.sites.schedulers`,
launcher options per launcher in :mod:`orchestrator.sites.launcher_options`.
"""

from __future__ import annotations

from typing import Any, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.errors import UserError

M = TypeVar("M", bound="Options")

Loc = tuple[Any, ...]


class Options(BaseModel):
    """Base of the option models: a key the model does not declare is an error."""

    model_config = ConfigDict(extra="forbid")


def option_names(model: type[BaseModel]) -> list[str]:
    """The keys an options model takes, sorted (what an error lists as valid)."""
    return sorted(model.model_fields)


def option_problem(model: type[BaseModel], data: Any, what: str) -> tuple[Loc, Loc, str] | None:
    """The first problem of ``data`` as options of ``model`` (``what`` names their owner, e.g.
    "launcher gaudi_spawn"): (where its line is, the field to name, the message), locations
    relative to the options mapping; None when they validate. An unknown key lists the valid
    ones; a value outside a choice lists the choices."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        if first["type"] == "extra_forbidden" and loc:
            valid = ", ".join(option_names(model)) or f"none: {what} takes no options"
            return loc, loc[:-1], f"unknown option {loc[-1]!r} for {what} (valid: {valid})"
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "literal_error":
            message = f"{message}, got {first['input']!r}"
        return loc, loc, message
    return None


def typed_options(model: type[M], options: Mapping[str, Any] | BaseModel | None, what: str) -> M:
    """``options`` as ``model`` (a mapping is validated; an instance of the model is copied);
    UserError, one line, when they do not validate."""
    if isinstance(options, model):
        return options.model_copy(deep=True)
    data = options.model_dump(exclude_unset=True) if isinstance(options, BaseModel) else dict(options or {})
    problem = option_problem(model, data, what)
    if problem is not None:
        _, field, message = problem
        where = ".".join(str(part) for part in field)
        raise UserError(f"{what} options{': ' + where if where else ''}: {message}")
    return model.model_validate(data)
