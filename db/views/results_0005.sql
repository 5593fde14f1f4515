-- results (as of migration 0005): one row per finished attempt, read from result_rows.
-- Every column is defined in db/glossary.yaml (`orch glossary results`).
-- 0005 adds: started_at (when the run got its cores or nodes), cores and threads (what it held),
-- global_batch, timed_time_s, and the median-based rates beside the total-based headline ones.
CREATE VIEW results AS
SELECT run_id, sweep, experiment, site, system, workload, status, failure_class, attempt, device_type,
       device_model, devices, nodes, precision, strategy, batch_size, seq_len, repeat, params,
       tokens_per_s, samples_per_s, tflops, tflops_per_device, mfu, peak_mem_gb, step_time_s,
       step_time_p50_s, step_time_p90_s, step_time_std_s, epoch_time_s, bandwidth_gbs,
       tokens_per_s_median, samples_per_s_median, tflops_median, timed_time_s, global_batch, cores, threads,
       job_id, node_list, exit_code, elapsed_s, submitted_at, started_at, finished_at
FROM result_rows
