-- The GPUs of the profiled machine (TARGET_INFO_GPU). memoryBandwidth is in bytes per second and
-- clockRate in Hz, as the nsys schema comments say.
SELECT
    g.id AS device_id,
    g.cuDevice AS cuda_device,
    g.name AS name,
    g.chipName AS chip_name,
    g.busLocation AS bus_location,
    g.uuid AS uuid,
    g.totalMemory AS total_memory_bytes,
    g.memoryBandwidth AS memory_bandwidth_bytes_per_s,
    g.l2CacheSize AS l2_cache_bytes,
    g.clockRate AS clock_rate_hz,
    g.smCount AS sm_count,
    g.computeMajor AS compute_major,
    g.computeMinor AS compute_minor,
    g.asyncEngines AS async_engines,
    g.threadsPerWarp AS threads_per_warp
FROM TARGET_INFO_GPU AS g
ORDER BY g.id
