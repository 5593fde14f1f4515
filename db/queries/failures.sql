-- What failed, where, and why (one row per failed attempt).
SELECT r.sweep, r.experiment, r.site, r.run_id, r.attempt, r.failure_class, r.exit_code,
       a.reason, r.job_id, r.node_list, r.finished_at
FROM results r
JOIN attempts a ON a.run_id = r.run_id AND a.number = r.attempt
WHERE r.status = 'failed'
ORDER BY r.finished_at
