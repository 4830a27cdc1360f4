-- NVTX push/pop and start/end ranges (marks and domain events excluded). The event-type ids are
-- looked up by name in ENUM_NSYS_EVENT_TYPE. text is the literal text or the registered string;
-- domain is the name given by the NvtxDomainCreate event of the same process (NULL: default).
-- :text filters on the resolved text (NULL: all ranges).
-- Placeholders: enum_event_type, thread_names (table or stand-in with globalTid, nameId), filters
-- (empty, or `AND ...` over n with named parameters: one thread, overlap with time spans).
SELECT
    n.start AS start_ns,
    n."end" AS end_ns,
    n."end" - n.start AS duration_ns,
    COALESCE(n.text, s.value) AS text,
    d.domain AS domain,
    CASE et.name WHEN 'NvtxPushPopRange' THEN 'push_pop' ELSE 'start_end' END AS range_type,
    (n.globalTid >> 24) & 16777215 AS pid,
    n.globalTid & 16777215 AS tid,
    n.globalTid AS global_tid,
    tn.value AS thread_name,
    n.domainId AS domain_id,
    n.category AS category
FROM NVTX_EVENTS AS n
JOIN {enum_event_type} AS et
    ON et.id = n.eventType AND et.name IN ('NvtxPushPopRange', 'NvtxStartEndRange')
LEFT JOIN StringIds AS s ON s.id = n.textId
LEFT JOIN (
    SELECT
        (dc.globalTid >> 24) & 16777215 AS pid,
        dc.domainId AS domain_id,
        MAX(COALESCE(dc.text, ds.value)) AS domain
    FROM NVTX_EVENTS AS dc
    JOIN {enum_event_type} AS dt ON dt.id = dc.eventType AND dt.name = 'NvtxDomainCreate'
    LEFT JOIN StringIds AS ds ON ds.id = dc.textId
    GROUP BY 1, 2
) AS d ON d.pid = (n.globalTid >> 24) & 16777215 AND d.domain_id = n.domainId
LEFT JOIN (
    SELECT globalTid, nameId, MAX(rowid) FROM {thread_names} GROUP BY globalTid
) AS t ON t.globalTid = n.globalTid
LEFT JOIN StringIds AS tn ON tn.id = t.nameId
WHERE (:text IS NULL OR COALESCE(n.text, s.value) = :text) {filters}
ORDER BY n.start, n.globalTid, n.rowid
