-- results (as of migration 0003): the same columns as before, now read from result_rows,
-- which orch fills when an attempt ends (orchestrator/results/db/results.py).
CREATE VIEW results AS
SELECT run_id, sweep, experiment, site, system, workload, status, failure_class, attempt, device_type,
       device_model, devices, nodes, precision, strategy, batch_size, seq_len, repeat, params,
       tokens_per_s, samples_per_s, tflops, tflops_per_device, mfu, peak_mem_gb, step_time_s,
       step_time_p50_s, step_time_p90_s, step_time_std_s, epoch_time_s, bandwidth_gbs, job_id, node_list,
       exit_code, elapsed_s, submitted_at, finished_at
FROM result_rows
