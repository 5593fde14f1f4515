-- Strategy comparison (studies B.3, B.4, D.1): peak memory against time per strategy
-- (ddp, fsdp-full, fsdp-grad-op, zero1-3) and model size, failed runs (e.g. out of memory) included.
SELECT workload, params, site, device_model, precision, devices, strategy, batch_size,
       SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END)          AS completed,
       SUM(CASE WHEN failure_class = 'out_of_memory' THEN 1 ELSE 0 END) AS out_of_memory,
       MAX(peak_mem_gb)  AS peak_mem_gb,
       AVG(step_time_s)  AS step_time_s,
       AVG(epoch_time_s) AS epoch_time_s,
       AVG(tokens_per_s) AS tokens_per_s,
       AVG(mfu)          AS mfu
FROM results
GROUP BY workload, params, site, device_model, precision, devices, strategy, batch_size
ORDER BY workload, params, devices, strategy
