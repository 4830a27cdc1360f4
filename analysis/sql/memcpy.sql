-- CUDA memory copies (CUPTI_ACTIVITY_KIND_MEMCPY). Kinds are read from the export's own enum tables:
-- copy_kind is the ENUM_CUDA_MEMCPY_OPER symbol, src/dst kinds are ENUM_CUDA_MEM_KIND labels, and
-- pageable is true when either side is the PAGEABLE memory kind (only host memory can be pageable).
-- gbps is bytes per nanosecond, i.e. decimal gigabytes per second.
-- Placeholders: times, ids (trace_schema.activity_sql("m")), enum_copy_kind, enum_mem_kind (table or stand-in subquery with id, name, label),
-- graph_node_id (m.graphNodeId or NULL).
SELECT
    {times},
    m.bytes AS bytes,
    ck.name AS copy_kind,
    CASE
        WHEN ck.name LIKE '%HTOD' THEN 'HtoD'
        WHEN ck.name LIKE '%DTOH' THEN 'DtoH'
        WHEN ck.name LIKE '%DTOD' THEN 'DtoD'
        WHEN ck.name LIKE '%HTOH' THEN 'HtoH'
        WHEN ck.name LIKE '%PTOP' THEN 'PtoP'
        WHEN ck.name LIKE '%HTOA' THEN 'HtoA'
        WHEN ck.name LIKE '%ATOH' THEN 'AtoH'
        WHEN ck.name LIKE '%ATOA' THEN 'AtoA'
        WHEN ck.name LIKE '%ATOD' THEN 'AtoD'
        WHEN ck.name LIKE '%DTOA' THEN 'DtoA'
        ELSE 'Unknown'
    END AS direction,
    sk.label AS src_kind,
    dk.label AS dst_kind,
    CASE
        WHEN sk.name LIKE '%PAGEABLE' OR dk.name LIKE '%PAGEABLE' THEN 1
        WHEN sk.name IS NULL OR dk.name IS NULL THEN NULL
        ELSE 0
    END AS pageable,
    {ids},
    {graph_node_id} AS graph_node_id,
    CAST(m.bytes AS REAL) / NULLIF(m."end" - m.start, 0) AS gbps
FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
LEFT JOIN {enum_copy_kind} AS ck ON ck.id = m.copyKind
LEFT JOIN {enum_mem_kind} AS sk ON sk.id = m.srcKind
LEFT JOIN {enum_mem_kind} AS dk ON dk.id = m.dstKind
ORDER BY m.start, m.correlationId
