-- CUDA memsets (CUPTI_ACTIVITY_KIND_MEMSET); mem_kind is the ENUM_CUDA_MEM_KIND label.
-- Placeholders: enum_mem_kind, mem_kind (m.memKind or NULL), graph_node_id (m.graphNodeId or NULL).
SELECT
    m.start AS start_ns,
    m."end" AS end_ns,
    m."end" - m.start AS duration_ns,
    m.bytes AS bytes,
    m.value AS value,
    mk.label AS mem_kind,
    m.deviceId AS device_id,
    m.streamId AS stream_id,
    m.contextId AS context_id,
    m.correlationId AS correlation_id,
    (m.globalPid >> 24) & 16777215 AS pid,
    m.globalPid AS global_pid,
    {graph_node_id} AS graph_node_id
FROM CUPTI_ACTIVITY_KIND_MEMSET AS m
LEFT JOIN {enum_mem_kind} AS mk ON mk.id = {mem_kind}
ORDER BY m.start, m.correlationId
