-- Precision comparison (studies A.1, B.1, C.1): each precision's throughput against fp32 of the
-- same workload, shape, site, device model and device count.
WITH per_precision AS (
    SELECT workload, params, site, device_model, devices, strategy, batch_size, seq_len, precision,
           throughput_metric, AVG(throughput) AS throughput, MAX(peak_mem_gb) AS peak_mem_gb
    FROM throughput
    GROUP BY workload, params, site, device_model, devices, strategy, batch_size, seq_len, precision,
             throughput_metric
)
SELECT p.workload, p.params, p.site, p.device_model, p.devices, p.strategy, p.batch_size, p.seq_len, p.precision,
       p.throughput_metric, p.throughput, p.peak_mem_gb,
       p.throughput / f.throughput AS vs_fp32
FROM per_precision p
LEFT JOIN per_precision f
       ON f.precision = 'fp32' AND f.workload = p.workload AND f.params = p.params AND f.site = p.site
      AND f.device_model = p.device_model AND f.devices = p.devices
      AND COALESCE(f.strategy, '') = COALESCE(p.strategy, '')
      AND COALESCE(f.batch_size, -1) = COALESCE(p.batch_size, -1)
      AND COALESCE(f.seq_len, -1) = COALESCE(p.seq_len, -1)
      AND f.throughput_metric = p.throughput_metric
ORDER BY p.workload, p.params, p.site, p.device_model, p.devices, p.strategy, p.batch_size, p.seq_len, p.precision
