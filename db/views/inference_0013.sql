-- inference (migration 0013; first in 0006): one row per completed llm_inference result, the
-- figures of study D.3 side by side: latency (TTFT, TPOT) against throughput over concurrent users,
-- one curve per site, system and model; MBU from the site's peak bandwidth; cost of 1M output
-- tokens from the site's price. 0013: counts (concurrency, token lengths, TTFT samples) are
-- integers, and p99_note warns of a percentile read from too few samples (issue 27: a p99 of 3).
-- {model} is the dialect's JSON lookup of params.model, {samples} of the metrics file's
-- timing.timed_steps (the migration fills them in).
CREATE VIEW inference AS
WITH m AS (
    SELECT attempt_id,
           MAX(CASE WHEN name = 'concurrency' THEN value END)                  AS concurrency,
           MAX(CASE WHEN name = 'input_len' THEN value END)                    AS input_len,
           MAX(CASE WHEN name = 'output_len' THEN value END)                   AS output_len,
           MAX(CASE WHEN name = 'ttft_p50_s' THEN value END)                   AS ttft_p50_s,
           MAX(CASE WHEN name = 'ttft_p90_s' THEN value END)                   AS ttft_p90_s,
           MAX(CASE WHEN name = 'ttft_p99_s' THEN value END)                   AS ttft_p99_s,
           MAX(CASE WHEN name = 'tpot_s' THEN value END)                       AS tpot_s,
           MAX(CASE WHEN name = 'output_tokens_per_s' THEN value END)          AS output_tokens_per_s,
           MAX(CASE WHEN name = 'output_tokens_per_s_per_user' THEN value END) AS output_tokens_per_s_per_user,
           MAX(CASE WHEN name = 'requests_per_s' THEN value END)               AS requests_per_s,
           MAX(CASE WHEN name = 'decode_bandwidth_gbs' THEN value END)         AS decode_bandwidth_gbs,
           MAX(CASE WHEN name = 'prefill_tflops' THEN value END)               AS prefill_tflops
    FROM metric_values
    GROUP BY attempt_id
)
SELECT rr.run_id, rr.attempt, rr.sweep, rr.experiment, rr.site, rr.system, rr.device_model, rr.devices,
       rr.precision, {model} AS model, CAST(m.concurrency AS INTEGER) AS concurrency,
       CAST(m.input_len AS INTEGER) AS input_len, CAST(m.output_len AS INTEGER) AS output_len,
       m.ttft_p50_s, m.ttft_p90_s, m.ttft_p99_s, CAST({samples} AS INTEGER) AS ttft_samples,
       CASE WHEN CAST({samples} AS INTEGER) < 10
            THEN 'p90 and p99 from ' || CAST({samples} AS INTEGER) || ' samples: too few (p90 needs ~10, p99 ~100)'
            WHEN CAST({samples} AS INTEGER) < 100
            THEN 'p99 from ' || CAST({samples} AS INTEGER) || ' samples: too few (~100 needed)' END AS p99_note, m.tpot_s, m.output_tokens_per_s, m.output_tokens_per_s_per_user,
       m.requests_per_s, m.decode_bandwidth_gbs, ru.peak_bandwidth_gbs,
       CASE WHEN ru.peak_bandwidth_gbs > 0
            THEN m.decode_bandwidth_gbs / (rr.devices * ru.peak_bandwidth_gbs) END AS mbu,
       m.prefill_tflops,
       CASE WHEN ru.peak_tflops > 0 THEN m.prefill_tflops / (rr.devices * ru.peak_tflops) END AS prefill_mfu,
       ru.price_per_device_hour, ru.price_currency,
       CASE WHEN m.output_tokens_per_s > 0
            THEN ru.price_per_device_hour * rr.devices * 1e6 / (m.output_tokens_per_s * 3600.0) END
            AS cost_per_1m_tokens
FROM result_rows rr
JOIN m ON m.attempt_id = rr.attempt_id
JOIN runs ru ON ru.id = rr.run_id
LEFT JOIN metrics mt ON mt.attempt_id = rr.attempt_id
WHERE rr.status = 'completed' AND rr.workload = 'llm_inference'
