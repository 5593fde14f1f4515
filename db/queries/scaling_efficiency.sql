-- Scaling table (studies A.2, B.2, C.5): speedup and efficiency against the smallest device
-- count of the same workload, model, site, precision, strategy and per-device batch.
SELECT workload, site, device_model, precision, strategy, batch_size, seq_len, params,
       devices, repeats, throughput_metric,
       ROUND(CAST(throughput AS NUMERIC), 3) AS throughput,
       ROUND(CAST(speedup AS NUMERIC), 3)    AS speedup,
       ROUND(CAST(efficiency AS NUMERIC), 3) AS efficiency
FROM scaling
ORDER BY workload, site, device_model, precision, strategy, batch_size, params, devices
