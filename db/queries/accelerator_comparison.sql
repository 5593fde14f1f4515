-- Accelerators side by side: the best mean throughput of each device model per workload
-- configuration, with MFU where the site profile gives the device's peak.
SELECT workload, params, precision, batch_size, seq_len, device_model, site, devices,
       throughput_metric, MAX(mean) AS best_mean, MAX(repeats) AS repeats
FROM repeat_spread
GROUP BY workload, params, precision, batch_size, seq_len, device_model, site, devices, throughput_metric
ORDER BY workload, params, precision, best_mean DESC
