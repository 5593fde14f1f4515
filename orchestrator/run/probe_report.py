"""The report a site probe's job writes (``workloads/probe.py``, the ``probe`` section of its
metrics file), validated before it is judged or stored.

The job writes it into its run directory, so it may be anything (issue 53): a wrong type made
the judge raise and every later probe of a ``--collect`` went unjudged; a long string or a NUL
character made PostgreSQL refuse the row. Each field the judge reads is typed here and bounded
by the column it lands in (``site_probes``); anything else the job adds is kept as it came.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from orchestrator.results.ingest import read_bounded
from orchestrator.states import FailureClass

# A report is a few KB; the rank list of a large job is the longest part.
REPORT_MAX_BYTES = 16 * 1024 * 1024


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("holds a NUL character, which a database text column cannot")
    return text


# Free text (paths, errors, names): bounded so a report cannot fill the probes table.
Text = Annotated[str, Field(max_length=4096), AfterValidator(_no_nul)]
# A version, as the torch and deepspeed columns (String(100)) hold it.
Version = Annotated[str, Field(max_length=100), AfterValidator(_no_nul)]
Count = Annotated[int, Field(ge=0, le=1_000_000)]


class _Part(BaseModel):
    # strict: a number is a JSON number, not "4"; extra keys are kept (stored in the raw text).
    model_config = ConfigDict(extra="allow", strict=True)


class PythonSeen(_Part):
    executable: Text | None = None
    version: Text | None = None


class DevicesSeen(_Part):
    type: Text | None = None
    count: Count | None = None
    names: list[Text] = Field(default_factory=list, max_length=100_000)
    error: Text | None = None


class AllReduceSeen(_Part):
    ok: bool = False
    backend: Annotated[str, Field(max_length=20), AfterValidator(_no_nul)] | None = None  # String(20)
    ranks: Count | None = None
    busbw_gbs: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    error: Text | None = None


class RunDirSeen(_Part):
    path: Text | None = None
    token: Text | None = None
    error: Text | None = None


class RankSeen(_Part):
    hostname: Text | None = None


class ProbeReport(_Part):
    python: PythonSeen = Field(default_factory=PythonSeen)
    torch: Version | None = None
    torch_error: Text | None = None
    deepspeed: Version | None = None
    deepspeed_error: Text | None = None
    devices: DevicesSeen = Field(default_factory=DevicesSeen)
    allreduce: AllReduceSeen = Field(default_factory=AllReduceSeen)
    run_dir: RunDirSeen = Field(default_factory=RunDirSeen)
    modules: list[Text] = Field(default_factory=list, max_length=100_000)
    nodes: list[Text] = Field(default_factory=list, max_length=100_000)
    ranks: list[RankSeen] = Field(default_factory=list, max_length=100_000)


def read_report(path: Path) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(the validated ``probe`` section as plain data, the file's text to store, why it was
    refused): (None, None, None) where there is no report, (None, None, reason) for a bad one."""
    raw = read_bounded(path, limit=REPORT_MAX_BYTES)
    if not isinstance(raw, bytes):  # absent, or not a regular file orch may read (a link, a FIFO, too large)
        return None, None, (None if raw.failure == FailureClass.MISSING_METRICS else raw.reason)
    try:
        # pydantic's parser: a nesting limit (a ValueError, not a RecursionError), no NaN.
        doc = pydantic_core.from_json(raw, allow_inf_nan=False)
        text = raw.decode("utf-8")
    except ValueError as exc:
        return None, None, f"{path.name} is not valid JSON ({exc})"
    report = doc.get("probe") if isinstance(doc, dict) else None
    if report is None:
        return None, None, None
    try:
        checked = ProbeReport.model_validate(report)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]).replace("\x00", "\\0") or "probe"
        message = str(first["msg"]).removeprefix("Value error, ")
        return None, None, f"{path.name}: probe.{where}: {message}"[:600]
    return checked.model_dump(), text, None
