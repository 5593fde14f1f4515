-- Accelerators side by side: the best mean throughput of each device model per workload
-- configuration (strategy included: ddp and fsdp are different configurations).
SELECT workload, params, precision, strategy, batch_size, seq_len, device_model, site, devices,
       throughput_metric, MAX(mean) AS best_mean, MAX(repeats) AS repeats
FROM repeat_spread
GROUP BY workload, params, precision, strategy, batch_size, seq_len, device_model, site, devices, throughput_metric
ORDER BY workload, params, precision, strategy, best_mean DESC
