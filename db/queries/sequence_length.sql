-- Sequence-length table (study A.3): tokens/s and peak memory per model and sequence length.
SELECT workload, params, site, device_model, precision, strategy, devices, seq_len,
       COUNT(*)              AS repeats,
       AVG(tokens_per_s)     AS tokens_per_s,
       MAX(peak_mem_gb)      AS peak_mem_gb,
       AVG(step_time_s)      AS step_time_s
FROM results
WHERE status = 'completed' AND seq_len IS NOT NULL
GROUP BY workload, params, site, device_model, precision, strategy, devices, seq_len
ORDER BY workload, params, site, device_model, precision, strategy, devices, seq_len
