-- GPU-side synchronisation records (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION); sync_type is the
-- ENUM_CUPTI_SYNC_TYPE label. CUPTI writes 0xFFFFFFFF for "no stream" / "no event": made NULL.
-- Placeholder: enum_sync_type.
SELECT
    y.start AS start_ns,
    y."end" AS end_ns,
    y."end" - y.start AS duration_ns,
    st.label AS sync_type,
    y.deviceId AS device_id,
    NULLIF(y.streamId, 4294967295) AS stream_id,
    y.contextId AS context_id,
    y.correlationId AS correlation_id,
    NULLIF(y.eventId, 4294967295) AS event_id,
    (y.globalPid >> 24) & 16777215 AS pid,
    y.globalPid AS global_pid
FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS y
LEFT JOIN {enum_sync_type} AS st ON st.id = y.syncType
ORDER BY y.start, y.correlationId
