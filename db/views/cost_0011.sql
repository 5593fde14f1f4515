-- cost: what each completed result cost at its site's price, charged as the centre charges: for
-- charged_devices devices (every device of the run's nodes when it holds them whole, as a
-- benchmark run on accelerators does; else the devices it used; the plan's predicted cost uses
-- the same rule, orchestrator/plan/cost.py), at the profile's price per device-hour (or per
-- node-hour divided by the devices of a node); and performance per unit of price (study D.2:
-- TFLOP/s per device over $ per device-hour). Runs planned before migration 0011 have no
-- charged_devices: their own devices are charged. Sites without a price keep their rows, with
-- NULL costs and price_note saying so.
CREATE VIEW cost AS
SELECT
    t.run_id, t.attempt, t.sweep, t.experiment, t.workload, t.site, t.system, t.device_model, t.devices,
    t.nodes, t.precision, t.strategy, t.batch_size, t.seq_len, t.params, t.throughput_metric, t.throughput,
    t.tflops, t.tflops / t.devices                     AS tflops_per_device,
    t.mfu, t.elapsed_s,
    t.throughput * 3600.0 / t.nodes                    AS per_node_hour,
    ru.price_per_device_hour,
    ru.cost_per_node_hour,
    ru.price_currency,
    ru.price_source,
    COALESCE(ru.charged_devices, t.devices)            AS charged_devices,
    ru.price_per_device_hour * COALESCE(ru.charged_devices, t.devices) AS cost_per_hour,
    ru.price_per_device_hour * COALESCE(ru.charged_devices, t.devices) * t.elapsed_s / 3600.0 AS cost_per_result,
    CASE WHEN ru.price_per_device_hour > 0
         THEN t.throughput * 3600.0 / (ru.price_per_device_hour * COALESCE(ru.charged_devices, t.devices))
         END AS throughput_per_price,
    CASE WHEN ru.price_per_device_hour > 0
         THEN t.tflops / t.devices / ru.price_per_device_hour END AS tflops_per_device_per_price,
    CASE WHEN ru.cost_per_node_hour > 0
         THEN t.throughput * 3600.0 / (t.nodes * ru.cost_per_node_hour) END AS per_cost_unit,
    CASE WHEN ru.price_per_device_hour IS NULL
         THEN 'no price in the profile of site ' || t.site || ' when the run was planned' END AS price_note
FROM throughput t
JOIN runs ru ON ru.id = t.run_id
