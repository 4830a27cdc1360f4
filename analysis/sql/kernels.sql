-- CUDA kernels as they ran on the GPU (CUPTI_ACTIVITY_KIND_KERNEL), names resolved through StringIds.
-- Placeholder graph_node_id: k.graphNodeId, or NULL where the export has no such column.
SELECT
    k.start AS start_ns,
    k."end" AS end_ns,
    k."end" - k.start AS duration_ns,
    k.deviceId AS device_id,
    k.streamId AS stream_id,
    k.contextId AS context_id,
    k.correlationId AS correlation_id,
    (k.globalPid >> 24) & 16777215 AS pid,
    k.globalPid AS global_pid,
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
