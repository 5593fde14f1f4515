-- Derived views (migration 0002). Portable SQL: window functions run on SQLite >= 3.25 and PostgreSQL.
-- Statements are separated by lines holding only ";;" (the migration splits on them).

-- throughput: one figure per completed attempt to compare runs by: tokens/s for language
-- models, samples/s otherwise, TFLOP/s for kernels, GB/s for collectives.
CREATE VIEW throughput AS
SELECT
    r.*,
    CASE WHEN r.tokens_per_s IS NOT NULL THEN 'tokens_per_s'
         WHEN r.samples_per_s IS NOT NULL THEN 'samples_per_s'
         WHEN r.tflops IS NOT NULL THEN 'tflops'
         WHEN r.bandwidth_gbs IS NOT NULL THEN 'bandwidth_gbs' END AS throughput_metric,
    COALESCE(r.tokens_per_s, r.samples_per_s, r.tflops, r.bandwidth_gbs) AS throughput
FROM results r
WHERE r.status = 'completed'
;;
-- repeat_spread: the spread over repeats of the same configuration.
CREATE VIEW repeat_spread AS
SELECT
    sweep, experiment, workload, site, system, device_model, devices, nodes, precision, strategy,
    batch_size, seq_len, params, throughput_metric,
    COUNT(*)                                   AS repeats,
    AVG(throughput)                            AS mean,
    MIN(throughput)                            AS min,
    MAX(throughput)                            AS max,
    AVG(throughput * throughput) - AVG(throughput) * AVG(throughput) AS variance,
    CASE WHEN AVG(throughput) > 0 THEN (MAX(throughput) - MIN(throughput)) / AVG(throughput) END AS rel_range
FROM throughput
GROUP BY sweep, experiment, workload, site, system, device_model, devices, nodes, precision, strategy,
         batch_size, seq_len, params, throughput_metric
;;
-- scaling: speedup and efficiency against the smallest device count of the same group
-- (workload, parameters incl. model, site, precision, strategy, per-device batch, sequence length),
-- as the studies' scaling tables compute them. Repeats are averaged first.
CREATE VIEW scaling AS
WITH point AS (
    SELECT sweep, workload, site, system, device_model, precision, strategy, batch_size, seq_len, params,
           throughput_metric, devices, AVG(throughput) AS throughput, COUNT(*) AS repeats
    FROM throughput
    GROUP BY sweep, workload, site, system, device_model, precision, strategy, batch_size, seq_len, params,
             throughput_metric, devices
), based AS (
    SELECT point.*,
           FIRST_VALUE(devices) OVER grp    AS base_devices,
           FIRST_VALUE(throughput) OVER grp AS base_throughput
    FROM point
    WINDOW grp AS (PARTITION BY sweep, workload, site, system, device_model, precision, strategy, batch_size,
                   seq_len, params, throughput_metric ORDER BY devices)
)
SELECT sweep, workload, site, system, device_model, precision, strategy, batch_size, seq_len, params,
       throughput_metric, devices, repeats, throughput, base_devices, base_throughput,
       throughput / base_throughput                                          AS speedup,
       (throughput / base_throughput) / (CAST(devices AS REAL) / base_devices) AS efficiency
FROM based
WHERE base_throughput > 0
;;
-- cost: throughput per node-hour, and per unit of the site's price where the profile gives one
-- (e.g. tokens per dollar); model TFLOP/s per device.
CREATE VIEW cost AS
SELECT
    t.run_id, t.attempt, t.sweep, t.experiment, t.workload, t.site, t.system, t.device_model, t.devices,
    t.nodes, t.precision, t.strategy, t.batch_size, t.seq_len, t.params, t.throughput_metric, t.throughput,
    t.tflops / t.devices                               AS tflops_per_device,
    t.mfu,
    t.throughput * 3600.0 / t.nodes                    AS per_node_hour,
    ru.cost_per_node_hour,
    CASE WHEN ru.cost_per_node_hour > 0
         THEN t.throughput * 3600.0 / (t.nodes * ru.cost_per_node_hour) END AS per_cost_unit
FROM throughput t
JOIN runs ru ON ru.id = t.run_id
;;
-- provenance: from a result to its sweep file, script, job, nodes, software and code revision.
CREATE VIEW provenance AS
SELECT
    a.run_id, a.number AS attempt, a.state AS status, r.sweep, s.path AS sweep_path,
    s.content_hash AS sweep_hash, r.script_hash, r.run_dir, a.scheduler, a.job_id, a.job_name,
    a.node_list, a.exit_code, a.failure_class, a.reason, r.orch_version, m.code_revision,
    e.python, e.torch, e.cuda, e.hostname, a.submitted_at, a.started_at, a.finished_at
FROM attempts a
JOIN runs r ON r.id = a.run_id
JOIN sweeps s ON s.id = r.sweep_id
LEFT JOIN metrics m ON m.attempt_id = a.id
LEFT JOIN environments e ON e.id = m.environment_id
