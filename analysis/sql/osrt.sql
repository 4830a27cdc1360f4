-- OS runtime calls (OSRT_API: read, open64, pthread_cond_wait, sem_wait, ...).
SELECT
    o.start AS start_ns,
    o."end" AS end_ns,
    o."end" - o.start AS duration_ns,
    s.value AS name,
    (o.globalTid >> 24) & 16777215 AS pid,
    o.globalTid & 16777215 AS tid,
    o.globalTid AS global_tid,
    o.returnValue AS return_value,
    o.nestingLevel AS nesting_level
FROM OSRT_API AS o
LEFT JOIN StringIds AS s ON s.id = o.nameId
ORDER BY o.start, o.globalTid
