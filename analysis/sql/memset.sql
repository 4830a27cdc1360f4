-- CUDA memsets (CUPTI_ACTIVITY_KIND_MEMSET); mem_kind is the ENUM_CUDA_MEM_KIND label.
-- Placeholders: times, ids (trace_schema.activity_sql("m")), enum_mem_kind, mem_kind (m.memKind
-- or NULL), graph_node_id (m.graphNodeId or NULL).
SELECT
    {times},
    m.bytes AS bytes,
    m.value AS value,
    mk.label AS mem_kind,
    {ids},
    {graph_node_id} AS graph_node_id
FROM CUPTI_ACTIVITY_KIND_MEMSET AS m
LEFT JOIN {enum_mem_kind} AS mk ON mk.id = {mem_kind}
ORDER BY m.start, m.correlationId
