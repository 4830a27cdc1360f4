-- One row per thread: ThreadNames (last name given) joined to its process through the globalPid,
-- which is the globalTid with the low 24 (tid) bits cleared.
-- Placeholder: processes (table or stand-in with globalPid, pid, name).
SELECT
    t.globalTid AS global_tid,
    (t.globalTid >> 24) & 16777215 AS pid,
    t.globalTid & 16777215 AS tid,
    s.value AS thread_name,
    p.name AS process_name
FROM (SELECT globalTid, nameId, MAX(rowid) FROM ThreadNames GROUP BY globalTid) AS t
LEFT JOIN StringIds AS s ON s.id = t.nameId
LEFT JOIN (
    SELECT globalPid, name, MAX(rowid) FROM {processes} GROUP BY globalPid
) AS p ON p.globalPid = (t.globalTid >> 24) << 24
ORDER BY 2, 3
