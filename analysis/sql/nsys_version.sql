-- The nsys version that wrote the export. The table is EXPORT_META_DATA up to 2022.x and
-- META_DATA_EXPORT in 2025.x; both hold a name/value row EXPORT_PRODUCT_VERSION.
-- Placeholder: meta_table.
SELECT value FROM {meta_table} WHERE name = 'EXPORT_PRODUCT_VERSION' LIMIT 1
