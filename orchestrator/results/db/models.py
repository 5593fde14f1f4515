"""SQLAlchemy models. The public surface for users is the ``results`` view (db/views)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from sqlalchemy import BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from orchestrator.states import FailureClass, RunState


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class SweepRecord(Base):
    """A sweep file as it was planned: the text is kept, so every result leads back to it."""

    __tablename__ = "sweeps"
    __table_args__ = (UniqueConstraint("name", "content_hash"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    path: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    content: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Run(Base):
    """One concrete run of a sweep: spec, placement and rendered script."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id"), index=True)
    sweep: Mapped[str] = mapped_column(String(200), index=True)
    experiment: Mapped[str] = mapped_column(String(200))
    workload: Mapped[str] = mapped_column(String(100))
    site: Mapped[str] = mapped_column(String(100), index=True)
    system: Mapped[str | None] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20), index=True)  # a RunState (orchestrator/states.py)
    skip_reason: Mapped[str | None] = mapped_column(Text)
    devices: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int | None] = mapped_column(Integer)
    tasks_per_node: Mapped[int | None] = mapped_column(Integer)
    queue: Mapped[str | None] = mapped_column(String(100))
    precision: Mapped[str] = mapped_column(String(10))
    strategy: Mapped[str | None] = mapped_column(String(40))
    batch_size: Mapped[int | None] = mapped_column(Integer)
    seq_len: Mapped[int | None] = mapped_column(Integer)
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    params: Mapped[str] = mapped_column(Text, default="{}")  # JSON text
    spec: Mapped[str] = mapped_column(Text)  # JSON text of the whole RunSpec
    walltime_s: Mapped[int] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer, default=1)
    retry_on: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of failure classes
    device_type: Mapped[str | None] = mapped_column(String(20))
    device_model: Mapped[str | None] = mapped_column(String(100))
    peak_tflops: Mapped[float | None] = mapped_column(Float)
    scheduler: Mapped[str | None] = mapped_column(String(20))
    script_hash: Mapped[str | None] = mapped_column(String(64))
    script: Mapped[str | None] = mapped_column(Text)
    run_dir: Mapped[str | None] = mapped_column(Text)
    cost_per_node_hour: Mapped[float | None] = mapped_column(Float)
    # The site's price when the run was planned (migration 0005), per device-hour.
    price_per_device_hour: Mapped[float | None] = mapped_column(Float)
    # The devices a centre charges the run for (orchestrator/plan/cost.py charged_devices): its
    # nodes' every device when it holds them whole, else its own. NULL for runs planned before 0011.
    charged_devices: Mapped[int | None] = mapped_column(Integer)
    price_currency: Mapped[str | None] = mapped_column(String(10))
    price_source: Mapped[str | None] = mapped_column(Text)
    # params without how a global batch is split (grad_accum): strong scaling groups by it.
    shape_params: Mapped[str | None] = mapped_column(Text)
    # The device's peak memory bandwidth from the profile (migration 0006; MBU).
    peak_bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    # Per-device peak of live tensor memory predicted at plan time (migration 0007), GB.
    predicted_peak_gb: Mapped[float | None] = mapped_column(Float)
    # Seconds of a step and of the whole run predicted at plan time by the time model (migration 0008).
    predicted_step_s: Mapped[float | None] = mapped_column(Float)
    predicted_run_s: Mapped[float | None] = mapped_column(Float)
    orch_version: Mapped[str | None] = mapped_column(String(40))
    # The run's current epoch (migration 0016): 1 when planned, one more per `orch again`; and the
    # number of that epoch's first attempt, so the retry policy counts one epoch's attempts.
    epoch: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    epoch_first_attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    attempts: Mapped[list["Attempt"]] = relationship(back_populates="run", order_by="Attempt.number")

    def status_after_failure(self, attempt_number: int, failure_class: str | None) -> RunState:
        """The run's status once attempt ``attempt_number`` failed with ``failure_class``:
        ``retry`` while the sweep's policy names the class and attempts remain."""
        in_epoch = attempt_number - (self.epoch_first_attempt or 1) + 1
        if failure_class in json.loads(self.retry_on or "[]") and in_epoch < self.max_attempts:
            return RunState.RETRY
        return RunState.CANCELLED if failure_class == FailureClass.CANCELLED else RunState.FAILED


class Attempt(Base):
    """One submission of a run. The row is written before the scheduler call (state
    ``AttemptState.SUBMITTING``) and the job id after it, so an interrupted submit can be repaired."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("run_id", "number"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20), index=True)  # an AttemptState (orchestrator/states.py)
    failure_class: Mapped[str | None] = mapped_column(String(30))  # a FailureClass when the attempt failed
    reason: Mapped[str | None] = mapped_column(Text)
    scheduler: Mapped[str] = mapped_column(String(20))
    job_id: Mapped[str | None] = mapped_column(String(100), index=True)
    job_name: Mapped[str] = mapped_column(String(200))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    node_list: Mapped[str | None] = mapped_column(Text)
    elapsed_s: Mapped[float | None] = mapped_column(Float)
    max_rss_mb: Mapped[float | None] = mapped_column(Float)
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Times the scheduler started this job (PBS run_count; > 1 after a requeue: started_at and
    # elapsed_s are then the last run's). NULL where the scheduler does not say (migration 0010).
    run_count: Mapped[int | None] = mapped_column(Integer)
    # What the attempt was submitted with (migration 0016): its run's epoch then, the script's
    # sha256 (text in ``scripts``), the site profile's sha256 and the orch that submitted it.
    epoch: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    script_hash: Mapped[str | None] = mapped_column(String(64))
    profile_hash: Mapped[str | None] = mapped_column(String(64))
    orch_version: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    run: Mapped[Run] = relationship(back_populates="attempts")
    metrics: Mapped["Metrics | None"] = relationship(back_populates="attempt")


class ScriptText(Base):
    """Each distinct rendered batch script once, by its sha256 (migration 0016): the script an
    attempt of an earlier epoch ran with, after ``orch again`` rendered the run's script anew."""

    __tablename__ = "scripts"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)


class Environment(Base):
    """A software environment as a workload reported it, stored once per distinct content."""

    __tablename__ = "environments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    python: Mapped[str | None] = mapped_column(String(50))
    torch: Mapped[str | None] = mapped_column(String(50))
    cuda: Mapped[str | None] = mapped_column(String(50))
    hostname: Mapped[str | None] = mapped_column(String(200))
    data: Mapped[str] = mapped_column(Text)  # JSON text


class Metrics(Base):
    """The headline figures of one attempt as columns, and the whole metrics file as JSON."""

    __tablename__ = "metrics"
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), primary_key=True)
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"))
    schema: Mapped[str] = mapped_column(String(40))
    device_model: Mapped[str | None] = mapped_column(String(200))
    world_size: Mapped[int | None] = mapped_column(Integer)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    tflops_per_device: Mapped[float | None] = mapped_column(Float)
    mfu: Mapped[float | None] = mapped_column(Float)
    peak_mem_gb: Mapped[float | None] = mapped_column(Float)
    step_time_s: Mapped[float | None] = mapped_column(Float)
    step_time_p50_s: Mapped[float | None] = mapped_column(Float)
    step_time_p90_s: Mapped[float | None] = mapped_column(Float)
    step_time_std_s: Mapped[float | None] = mapped_column(Float)
    epoch_time_s: Mapped[float | None] = mapped_column(Float)
    bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    tokens_per_s_median: Mapped[float | None] = mapped_column(Float)
    samples_per_s_median: Mapped[float | None] = mapped_column(Float)
    tflops_median: Mapped[float | None] = mapped_column(Float)
    timed_time_s: Mapped[float | None] = mapped_column(Float)
    global_batch: Mapped[float | None] = mapped_column(Float)
    cores: Mapped[float | None] = mapped_column(Float)
    threads: Mapped[float | None] = mapped_column(Float)
    code_revision: Mapped[str | None] = mapped_column(String(80))  # git revision of the workload code
    raw: Mapped[str] = mapped_column(Text)  # the metrics file as ingested
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    attempt: Mapped[Attempt] = relationship(back_populates="metrics")


class MetricValue(Base):
    """One numeric metric of one attempt, by name (every metric the workload reported)."""

    __tablename__ = "metric_values"
    # SQLite keeps it without a rowid (migration 0004): one b-tree entry per metric.
    __table_args__ = {"sqlite_with_rowid": False}
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class MetricSeries(Base):
    """One point of a per-step series of one attempt (migration 0014): the ``series`` of its
    metrics file, e.g. the training loss at every k-th optimiser step (``loss_curve`` figure)."""

    __tablename__ = "metric_series"
    __table_args__ = {"sqlite_with_rowid": False}
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class ReferenceFigure(Base):
    """A figure a result is checked against: a published study's, a vendor's, or an earlier
    sweep's. NULL in a matching field means "any"; ``key`` hashes the matching fields and the
    metric, so loading the same reference again replaces it."""

    __tablename__ = "reference_figures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(200))
    workload: Mapped[str] = mapped_column(String(100))
    site: Mapped[str | None] = mapped_column(String(100))
    system: Mapped[str | None] = mapped_column(String(100))
    device_model: Mapped[str | None] = mapped_column(String(200))
    precision: Mapped[str | None] = mapped_column(String(10))
    devices: Mapped[int | None] = mapped_column(Integer)
    strategy: Mapped[str | None] = mapped_column(String(40))
    batch_size: Mapped[int | None] = mapped_column(Integer)
    seq_len: Mapped[int | None] = mapped_column(Integer)
    params: Mapped[str | None] = mapped_column(Text)  # the run's params JSON, matched exactly
    metric: Mapped[str] = mapped_column(String(100))
    value: Mapped[float] = mapped_column(Float)
    tolerance: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SiteProbe(Base):
    """One ``orch sites probe`` job (migration 0009): what a compute node showed for one version of a
    site's profile (``profile_hash``: orchestrator/sites/fingerprint.py). A check's column is NULL where
    the probe could not find out; ``checks`` holds every check's outcome, detail and fix, ``report``
    the probe program's own report (workloads/probe.py)."""

    __tablename__ = "site_probes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    site: Mapped[str] = mapped_column(String(100), index=True)
    system: Mapped[str | None] = mapped_column(String(100))
    profile_hash: Mapped[str] = mapped_column(String(64), index=True)
    profile_path: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(20), index=True)  # a ProbeState (orchestrator/states.py)
    scheduler: Mapped[str] = mapped_column(String(20))
    job_id: Mapped[str | None] = mapped_column(String(100))
    run_dir: Mapped[str] = mapped_column(Text)
    token: Mapped[str] = mapped_column(String(64))  # what the marker file says (the job reads it back)
    nodes_requested: Mapped[int] = mapped_column(Integer)
    ranks_requested: Mapped[int] = mapped_column(Integer)
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    passed: Mapped[bool | None] = mapped_column(Boolean)
    failed_checks: Mapped[str | None] = mapped_column(Text)  # comma-separated check names
    python: Mapped[str | None] = mapped_column(Text)  # "<version> <executable>"
    torch: Mapped[str | None] = mapped_column(String(100))  # version, or "absent"
    deepspeed: Mapped[str | None] = mapped_column(String(100))  # version, or "absent"
    devices: Mapped[str | None] = mapped_column(Text)  # "<count> x <type>: <names>"
    allreduce_gbs: Mapped[float | None] = mapped_column(Float)  # bus bandwidth of the all-reduce
    allreduce_backend: Mapped[str | None] = mapped_column(String(20))
    nodes: Mapped[int | None] = mapped_column(Integer)  # distinct nodes the ranks ran on
    run_dir_visible: Mapped[bool | None] = mapped_column(Boolean)
    modules: Mapped[str | None] = mapped_column(Text)  # $LOADEDMODULES, space-separated
    hostnames: Mapped[str | None] = mapped_column(Text)  # the ranks' hosts, space-separated
    checks: Mapped[str | None] = mapped_column(Text)  # JSON list: name, ok, value, detail, fix
    report: Mapped[str | None] = mapped_column(Text)  # the probe's JSON report as it came back
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
