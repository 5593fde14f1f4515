-- serving (migration 0015, replaces serving_0012.sql): one row per completed llm_serving result
-- (issue 28): latency (TTFT, ITL, TPOT, end-to-end percentiles with their sample counts) against
-- throughput at each offered request rate or concurrency, goodput under the run's SLO, and what
-- the tokens cost at the site's price, charged as the cost view charges (cost_0011.sql: for
-- charged_devices, every device of the run's nodes when it holds them whole; runs planned before
-- 0011 are charged their own devices):
--   cost_per_hour                 = price_per_device_hour x charged_devices
--   cost_per_1m_tokens            = cost_per_hour x 1e6 / (output_tokens_per_s x 3600), the site's currency
--   usd_per_million_output_tokens = the same where the price is in USD, else NULL
--   usd_per_million_tokens        = cost_per_hour x 1e6 / ((input + output tokens/s) x 3600), USD only
-- NULL where the site had no price when the run was planned (price_note says so). {model},
-- {backend} and {arrival} are the dialect's JSON lookups of params (the migration fills them in).
CREATE VIEW serving AS
WITH m AS (
    SELECT attempt_id,
           MAX(CASE WHEN name = 'request_rate' THEN value END)           AS request_rate,
           MAX(CASE WHEN name = 'concurrency' THEN value END)            AS concurrency,
           MAX(CASE WHEN name = 'input_len' THEN value END)              AS input_len,
           MAX(CASE WHEN name = 'output_len' THEN value END)             AS output_len,
           MAX(CASE WHEN name = 'requests_completed' THEN value END)     AS requests_completed,
           MAX(CASE WHEN name = 'requests_failed' THEN value END)        AS requests_failed,
           MAX(CASE WHEN name = 'requests_per_s' THEN value END)         AS requests_per_s,
           MAX(CASE WHEN name = 'output_tokens_per_s' THEN value END)    AS output_tokens_per_s,
           MAX(CASE WHEN name = 'input_tokens_per_s' THEN value END)     AS input_tokens_per_s,
           MAX(CASE WHEN name = 'ttft_p50_s' THEN value END)             AS ttft_p50_s,
           MAX(CASE WHEN name = 'ttft_p90_s' THEN value END)             AS ttft_p90_s,
           MAX(CASE WHEN name = 'ttft_p99_s' THEN value END)             AS ttft_p99_s,
           MAX(CASE WHEN name = 'ttft_count' THEN value END)             AS ttft_count,
           MAX(CASE WHEN name = 'itl_p50_s' THEN value END)              AS itl_p50_s,
           MAX(CASE WHEN name = 'itl_p90_s' THEN value END)              AS itl_p90_s,
           MAX(CASE WHEN name = 'itl_p99_s' THEN value END)              AS itl_p99_s,
           MAX(CASE WHEN name = 'itl_count' THEN value END)              AS itl_count,
           MAX(CASE WHEN name = 'tpot_p50_s' THEN value END)             AS tpot_p50_s,
           MAX(CASE WHEN name = 'tpot_p90_s' THEN value END)             AS tpot_p90_s,
           MAX(CASE WHEN name = 'tpot_p99_s' THEN value END)             AS tpot_p99_s,
           MAX(CASE WHEN name = 'tpot_count' THEN value END)             AS tpot_count,
           MAX(CASE WHEN name = 'e2e_p50_s' THEN value END)              AS e2e_p50_s,
           MAX(CASE WHEN name = 'e2e_p90_s' THEN value END)              AS e2e_p90_s,
           MAX(CASE WHEN name = 'e2e_p99_s' THEN value END)              AS e2e_p99_s,
           MAX(CASE WHEN name = 'e2e_count' THEN value END)              AS e2e_count,
           MAX(CASE WHEN name = 'slo_ttft_s' THEN value END)             AS slo_ttft_s,
           MAX(CASE WHEN name = 'slo_tpot_s' THEN value END)             AS slo_tpot_s,
           MAX(CASE WHEN name = 'goodput_requests_per_s' THEN value END) AS goodput_requests_per_s,
           MAX(CASE WHEN name = 'goodput_fraction' THEN value END)       AS goodput_fraction,
           MAX(CASE WHEN name = 'slo_met' THEN value END)                AS slo_met
    FROM metric_values
    GROUP BY attempt_id
)
SELECT rr.run_id, rr.attempt, rr.sweep, rr.experiment, rr.site, rr.system, rr.device_model, rr.devices,
       rr.precision, {model} AS model, {backend} AS backend, {arrival} AS arrival,
       m.request_rate, m.concurrency, m.input_len, m.output_len, m.requests_completed, m.requests_failed,
       m.requests_per_s, m.output_tokens_per_s,
       m.ttft_p50_s, m.ttft_p90_s, m.ttft_p99_s, m.ttft_count, m.itl_p50_s, m.itl_p90_s, m.itl_p99_s, m.itl_count,
       m.tpot_p50_s, m.tpot_p90_s, m.tpot_p99_s, m.tpot_count, m.e2e_p50_s, m.e2e_p90_s, m.e2e_p99_s, m.e2e_count,
       m.slo_ttft_s, m.slo_tpot_s, m.goodput_requests_per_s, m.goodput_fraction, m.slo_met,
       m.input_tokens_per_s,
       ru.price_per_device_hour, ru.price_currency,
       COALESCE(ru.charged_devices, rr.devices) AS charged_devices,
       ru.price_per_device_hour * COALESCE(ru.charged_devices, rr.devices) AS cost_per_hour,
       CASE WHEN m.output_tokens_per_s > 0
            THEN ru.price_per_device_hour * COALESCE(ru.charged_devices, rr.devices) * 1e6
                 / (m.output_tokens_per_s * 3600.0) END
            AS cost_per_1m_tokens,
       CASE WHEN m.output_tokens_per_s > 0 AND ru.price_currency = 'USD'
            THEN ru.price_per_device_hour * COALESCE(ru.charged_devices, rr.devices) * 1e6
                 / (m.output_tokens_per_s * 3600.0) END
            AS usd_per_million_output_tokens,
       CASE WHEN m.output_tokens_per_s > 0 AND ru.price_currency = 'USD'
            THEN ru.price_per_device_hour * COALESCE(ru.charged_devices, rr.devices) * 1e6
                 / ((COALESCE(m.input_tokens_per_s, 0) + m.output_tokens_per_s) * 3600.0) END
            AS usd_per_million_tokens,
       CASE WHEN ru.price_per_device_hour IS NULL
            THEN 'no price in the profile of site ' || rr.site || ' when the run was planned'
            WHEN ru.price_currency <> 'USD'
            THEN 'price in ' || ru.price_currency || ', not USD: usd_* columns are NULL' END AS price_note
FROM result_rows rr
JOIN m ON m.attempt_id = rr.attempt_id
JOIN runs ru ON ru.id = rr.run_id
WHERE rr.status = 'completed' AND rr.workload = 'llm_serving'
