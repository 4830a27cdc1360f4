-- CUDA kernels as they ran on the GPU (CUPTI_ACTIVITY_KIND_KERNEL), names resolved through StringIds.
-- Placeholders: times, ids (trace_schema.activity_sql("k")); graph_node_id: k.graphNodeId, or NULL
-- where the export has no such column.
SELECT
    {times},
    {ids},
    dn.value AS name,
    sn.value AS short_name,
    k.gridX AS grid_x,
    k.gridY AS grid_y,
    k.gridZ AS grid_z,
    k.blockX AS block_x,
    k.blockY AS block_y,
    k.blockZ AS block_z,
    k.registersPerThread AS registers_per_thread,
    k.staticSharedMemory AS static_shared_bytes,
    k.dynamicSharedMemory AS dynamic_shared_bytes,
    {graph_node_id} AS graph_node_id
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
LEFT JOIN StringIds AS dn ON dn.id = k.demangledName
LEFT JOIN StringIds AS sn ON sn.id = k.shortName
ORDER BY k.start, k.correlationId
