-- prediction_error (migration 0008): one row per completed result beside what orch predicted
-- when it planned the run. Memory: the per-device peak of live tensor bytes predicted from the
-- program (orchestrator/predict/memory_trace.py; the formula where torch was absent at plan time) against
-- the measured peak: peak_tensor_bytes where the workload reports it (CPU: the same tracker on
-- real tensors), else peak_mem_gb (CUDA/XPU max_memory_allocated). Neither side includes the
-- device's fixed cost (context, NCCL buffers), which the plan-time memory check adds.
-- Time (0008): the step time the time model predicted (orchestrator/predict/perfmodel/) against the
-- measured median step (step_time_p50_s; the mean step_time_s where no median was reported).
CREATE VIEW prediction_error AS
WITH m AS (
    SELECT attempt_id, MAX(value) AS peak_tensor_bytes
    FROM metric_values
    WHERE name = 'peak_tensor_bytes'
    GROUP BY attempt_id
)
SELECT rr.run_id, rr.attempt, rr.sweep, rr.experiment, rr.site, rr.system, rr.workload, rr.device_type,
       rr.device_model, rr.devices, rr.precision, rr.strategy, rr.batch_size, rr.seq_len,
       ru.predicted_peak_gb, rr.peak_mem_gb, m.peak_tensor_bytes / 1e9 AS peak_tensor_gb,
       COALESCE(m.peak_tensor_bytes / 1e9, rr.peak_mem_gb) AS measured_peak_gb,
       CASE WHEN COALESCE(m.peak_tensor_bytes / 1e9, rr.peak_mem_gb) > 0
            THEN (ru.predicted_peak_gb - COALESCE(m.peak_tensor_bytes / 1e9, rr.peak_mem_gb))
                 / COALESCE(m.peak_tensor_bytes / 1e9, rr.peak_mem_gb) END AS memory_error,
       ru.predicted_step_s, COALESCE(rr.step_time_p50_s, rr.step_time_s) AS measured_step_s,
       CASE WHEN COALESCE(rr.step_time_p50_s, rr.step_time_s) > 0
            THEN (ru.predicted_step_s - COALESCE(rr.step_time_p50_s, rr.step_time_s))
                 / COALESCE(rr.step_time_p50_s, rr.step_time_s) END AS step_error,
       ru.predicted_run_s
FROM result_rows rr
JOIN runs ru ON ru.id = rr.run_id
LEFT JOIN m ON m.attempt_id = rr.attempt_id
WHERE rr.status = 'completed'
