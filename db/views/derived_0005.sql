-- Derived views (migration 0005). Portable SQL: window functions run on SQLite >= 3.28 and PostgreSQL.
-- Statements are separated by lines holding only ";;" (the migration splits on them).
-- Every column is defined in db/glossary.yaml (`orch glossary VIEW`).

-- throughput: one figure per completed attempt to compare runs by: tokens/s for language
-- models, samples/s otherwise, TFLOP/s for kernels, GB/s for collectives (all total work over
-- total timed time; the median-based rates are results' *_median columns).
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
-- scaling: speedup and efficiency against the smallest device count of the same system and
-- configuration (sweep, workload, site, system, device model, precision, strategy, sequence
-- length, parameters), in two modes:
--   weak   = the same per-device batch (batch_size) at every device count;
--   strong = the same global batch (samples per optimiser step over all devices).
-- Repeats are averaged first; groups with a single device count are left out. epoch_speedup
-- is base epoch time over epoch time (study B), for runs that report epochs.
CREATE VIEW scaling AS
WITH point AS (
    SELECT 'weak' AS mode, sweep, workload, site, system, device_model, precision, strategy,
           CAST(batch_size AS REAL) AS batch_size, AVG(global_batch) AS global_batch, seq_len, params,
           throughput_metric, devices, COUNT(*) AS repeats, AVG(throughput) AS throughput,
           AVG(epoch_time_s) AS epoch_time_s
    FROM throughput
    GROUP BY sweep, workload, site, system, device_model, precision, strategy, batch_size, seq_len, params,
             throughput_metric, devices
    UNION ALL
    -- Strong scaling splits one global batch differently at each device count (per-device batch
    -- and gradient accumulation change): runs are grouped by shape_params, the parameters
    -- without gradient accumulation.
    SELECT 'strong' AS mode, t.sweep, t.workload, t.site, t.system, t.device_model, t.precision, t.strategy,
           AVG(t.batch_size) AS batch_size, t.global_batch, t.seq_len, COALESCE(ru.shape_params, t.params) AS params,
           t.throughput_metric, t.devices, COUNT(*) AS repeats, AVG(t.throughput) AS throughput,
           AVG(t.epoch_time_s) AS epoch_time_s
    FROM throughput t
    JOIN runs ru ON ru.id = t.run_id
    WHERE t.global_batch IS NOT NULL
    GROUP BY t.sweep, t.workload, t.site, t.system, t.device_model, t.precision, t.strategy, t.global_batch,
             t.seq_len, COALESCE(ru.shape_params, t.params), t.throughput_metric, t.devices
), based AS (
    SELECT point.*,
           FIRST_VALUE(devices) OVER grp        AS base_devices,
           FIRST_VALUE(throughput) OVER grp     AS base_throughput,
           FIRST_VALUE(epoch_time_s) OVER grp   AS base_epoch_time_s,
           COUNT(*) OVER grp_all                AS points
    FROM point
    WINDOW grp AS (PARTITION BY mode, sweep, workload, site, system, device_model, precision, strategy,
                   CASE WHEN mode = 'weak' THEN batch_size END, CASE WHEN mode = 'strong' THEN global_batch END,
                   seq_len, params, throughput_metric ORDER BY devices),
           grp_all AS (PARTITION BY mode, sweep, workload, site, system, device_model, precision, strategy,
                   CASE WHEN mode = 'weak' THEN batch_size END, CASE WHEN mode = 'strong' THEN global_batch END,
                   seq_len, params, throughput_metric)
)
SELECT mode, sweep, workload, site, system, device_model, precision, strategy, batch_size, global_batch, seq_len,
       params, throughput_metric, devices, repeats, throughput, base_devices, base_throughput,
       throughput / base_throughput                                            AS speedup,
       (throughput / base_throughput) / (CAST(devices AS REAL) / base_devices) AS efficiency,
       epoch_time_s, base_epoch_time_s,
       CASE WHEN epoch_time_s > 0 THEN base_epoch_time_s / epoch_time_s END    AS epoch_speedup,
       CASE WHEN epoch_time_s > 0
            THEN (base_epoch_time_s / epoch_time_s) / (CAST(devices AS REAL) / base_devices) END AS epoch_efficiency
FROM based
WHERE base_throughput > 0 AND points > 1
;;
-- cost: what each completed result cost at its site's price (the profile's price per device-hour,
-- or per node-hour divided by the devices of a node), and performance per unit of price
-- (study D.2: TFLOP/s per device over $ per device-hour). Sites without a price keep their
-- rows, with NULL costs and price_note saying so.
CREATE VIEW cost AS
SELECT
    t.run_id, t.attempt, t.sweep, t.experiment, t.workload, t.site, t.system, t.device_model, t.devices,
    t.nodes, t.precision, t.strategy, t.batch_size, t.seq_len, t.params, t.throughput_metric, t.throughput,
    t.tflops, t.tflops / t.devices                     AS tflops_per_device,
    t.mfu, t.elapsed_s,
    t.throughput * 3600.0 / t.nodes                    AS per_node_hour,
    ru.price_per_device_hour,
    ru.cost_per_node_hour,
    ru.price_currency,
    ru.price_source,
    ru.price_per_device_hour * t.devices               AS cost_per_hour,
    ru.price_per_device_hour * t.devices * t.elapsed_s / 3600.0 AS cost_per_result,
    CASE WHEN ru.price_per_device_hour > 0
         THEN t.throughput * 3600.0 / (ru.price_per_device_hour * t.devices) END AS throughput_per_price,
    CASE WHEN ru.price_per_device_hour > 0
         THEN t.tflops / t.devices / ru.price_per_device_hour END AS tflops_per_device_per_price,
    CASE WHEN ru.cost_per_node_hour > 0
         THEN t.throughput * 3600.0 / (t.nodes * ru.cost_per_node_hour) END AS per_cost_unit,
    CASE WHEN ru.price_per_device_hour IS NULL
         THEN 'no price in the profile of site ' || t.site || ' when the run was planned' END AS price_note
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
;;
-- reference_check: every completed result that a reference figure applies to, with the measured
-- value of the reference's metric (any metric the workload reported), the ratio and a verdict:
-- below (ratio < 1 - tolerance: a regression), within, or above (ratio > 1 + tolerance).
-- A reference applies when its workload and metric match and each of its other fields is NULL
-- (any) or equal to the result's.
CREATE VIEW reference_check AS
SELECT
    rr.run_id, rr.attempt, rr.sweep, rr.experiment, rr.workload, rr.site, rr.system, rr.device_model,
    rr.devices, rr.precision, rr.strategy, rr.batch_size, rr.seq_len, rr.params,
    f.id AS reference_id, f.name AS reference_name, f.metric, mv.value AS measured, f.value AS reference,
    mv.value / f.value AS ratio, f.tolerance,
    CASE WHEN mv.value < f.value * (1 - f.tolerance) THEN 'below'
         WHEN mv.value > f.value * (1 + f.tolerance) THEN 'above'
         ELSE 'within' END AS verdict,
    f.source
FROM result_rows rr
JOIN reference_figures f
  ON f.workload = rr.workload
 AND (f.site IS NULL OR f.site = rr.site)
 AND (f.system IS NULL OR f.system = rr.system)
 AND (f.device_model IS NULL OR f.device_model = rr.device_model)
 AND (f.precision IS NULL OR f.precision = rr.precision)
 AND (f.devices IS NULL OR f.devices = rr.devices)
 AND (f.strategy IS NULL OR f.strategy = rr.strategy)
 AND (f.batch_size IS NULL OR f.batch_size = rr.batch_size)
 AND (f.seq_len IS NULL OR f.seq_len = rr.seq_len)
 AND (f.params IS NULL OR f.params = rr.params)
JOIN metric_values mv ON mv.attempt_id = rr.attempt_id AND mv.name = f.metric
WHERE rr.status = 'completed' AND f.value > 0
