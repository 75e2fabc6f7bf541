-- fleetbench controller store, version 4 (identical on both backends): a level's error rate
-- (failed / sent), the share of its prompt tokens the engine served from its prefix cache
-- (NULL where the engine's metrics had no figure) and whether it was a burst (fewer measured
-- requests than 4 x its concurrency), as columns queries can filter on. NULL/0 for levels
-- stored before version 4; the level blob holds the full figures.
ALTER TABLE levels ADD COLUMN error_rate DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN prefix_cache_hit_rate DOUBLE PRECISION;
ALTER TABLE levels ADD COLUMN burst BIGINT NOT NULL DEFAULT 0;
