-- CUDA API calls on the CPU side (CUPTI_ACTIVITY_KIND_RUNTIME). Since 2025.x this table also holds
-- driver calls (eventClass TRACE_PROCESS_EVENT_CUDA_DRIVER); api tells them apart.
-- base_name and category are added in Python (version-suffix stripping needs a regex).
-- Placeholder: enum_event_class.
SELECT
    r.start AS start_ns,
    r."end" AS end_ns,
    r."end" - r.start AS duration_ns,
    s.value AS name,
    CASE
        WHEN ec.name LIKE '%DRIVER%' THEN 'driver'
        WHEN ec.name LIKE '%RUNTIME%' THEN 'runtime'
        ELSE NULL
    END AS api,
    r.correlationId AS correlation_id,
    (r.globalTid >> 24) & 16777215 AS pid,
    r.globalTid & 16777215 AS tid,
    r.globalTid AS global_tid,
    r.returnValue AS return_value
FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r
LEFT JOIN StringIds AS s ON s.id = r.nameId
LEFT JOIN {enum_event_class} AS ec ON ec.id = r.eventClass
ORDER BY r.start, r.correlationId
