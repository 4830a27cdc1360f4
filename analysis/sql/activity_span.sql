-- Earliest start and latest end of one activity table (run once per table that exists).
-- Placeholder: table.
SELECT MIN(start), MAX("end") FROM {table}
