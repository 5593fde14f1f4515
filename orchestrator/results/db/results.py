"""The rows behind the ``results`` view, written when an attempt ends.

``results`` is the public surface; a million rows of it must group in well under a
second, so each finished attempt's row is stored once, denormalised, in
``result_rows`` (a three-table join per query was ~1.2 s at that size on SQLite).
"""

from __future__ import annotations

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

COLUMNS = (
    "attempt_id, run_id, sweep, experiment, site, system, workload, status, failure_class, attempt, "
    "device_type, device_model, devices, nodes, precision, strategy, batch_size, seq_len, repeat, params, "
    "tokens_per_s, samples_per_s, tflops, tflops_per_device, mfu, peak_mem_gb, step_time_s, step_time_p50_s, "
    "step_time_p90_s, step_time_std_s, epoch_time_s, bandwidth_gbs, tokens_per_s_median, samples_per_s_median, "
    "tflops_median, timed_time_s, global_batch, cores, threads, job_id, node_list, exit_code, elapsed_s, "
    "submitted_at, started_at, finished_at"
)

SELECT = """
SELECT a.id, r.id, r.sweep, r.experiment, r.site, r.system, r.workload, a.state, a.failure_class, a.number,
       r.device_type, COALESCE(m.device_model, r.device_model), r.devices, r.nodes, r.precision, r.strategy,
       r.batch_size, r.seq_len, r.repeat, r.params,
       m.tokens_per_s, m.samples_per_s, m.tflops, m.tflops_per_device, m.mfu, m.peak_mem_gb, m.step_time_s,
       m.step_time_p50_s, m.step_time_p90_s, m.step_time_std_s, m.epoch_time_s, m.bandwidth_gbs,
       m.tokens_per_s_median, m.samples_per_s_median, m.tflops_median, m.timed_time_s, m.global_batch,
       m.cores, m.threads,
       a.job_id, a.node_list, a.exit_code, a.elapsed_s, a.submitted_at, a.started_at, a.finished_at
FROM attempts a
JOIN runs r ON r.id = a.run_id
LEFT JOIN metrics m ON m.attempt_id = a.id
WHERE a.state IN ('completed', 'failed')
"""


def record_results(session: Session, attempt_ids: list[int]) -> None:
    """(Re)write the result rows of these attempts from their current state (idempotent)."""
    session.flush()
    for start in range(0, len(attempt_ids), 500):
        chunk = attempt_ids[start:start + 500]
        session.execute(text("DELETE FROM result_rows WHERE attempt_id IN :ids")
                        .bindparams(bindparam("ids", expanding=True)), {"ids": chunk})
        session.execute(text(f"INSERT INTO result_rows ({COLUMNS}) {SELECT} AND a.id IN :ids")
                        .bindparams(bindparam("ids", expanding=True)), {"ids": chunk})
