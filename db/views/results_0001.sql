-- results (as of migration 0001): one row per finished attempt (completed or failed), the public surface of orch.
-- Portable SQL: the same text runs on SQLite and PostgreSQL.
CREATE VIEW results AS
SELECT
    r.id                AS run_id,
    r.sweep             AS sweep,
    r.experiment        AS experiment,
    r.site              AS site,
    r.system            AS system,
    r.workload          AS workload,
    a.state             AS status,
    a.failure_class     AS failure_class,
    a.number            AS attempt,
    r.device_type       AS device_type,
    COALESCE(m.device_model, r.device_model) AS device_model,
    r.devices           AS devices,
    r.nodes             AS nodes,
    r.precision         AS precision,
    r.strategy          AS strategy,
    r.batch_size        AS batch_size,
    r.seq_len           AS seq_len,
    r.repeat            AS repeat,
    r.params            AS params,
    m.tokens_per_s      AS tokens_per_s,
    m.samples_per_s     AS samples_per_s,
    m.tflops            AS tflops,
    m.tflops_per_device AS tflops_per_device,
    m.mfu               AS mfu,
    m.peak_mem_gb       AS peak_mem_gb,
    m.step_time_s       AS step_time_s,
    m.step_time_p50_s   AS step_time_p50_s,
    m.step_time_p90_s   AS step_time_p90_s,
    m.step_time_std_s   AS step_time_std_s,
    m.epoch_time_s      AS epoch_time_s,
    m.bandwidth_gbs     AS bandwidth_gbs,
    a.job_id            AS job_id,
    a.node_list         AS node_list,
    a.exit_code         AS exit_code,
    a.elapsed_s         AS elapsed_s,
    a.submitted_at      AS submitted_at,
    a.finished_at       AS finished_at
FROM attempts a
JOIN runs r ON r.id = a.run_id
LEFT JOIN metrics m ON m.attempt_id = a.id
WHERE a.state IN ('completed', 'failed');
