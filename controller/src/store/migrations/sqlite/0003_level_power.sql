-- fleetbench controller store, version 3 (identical on both backends): a level's mean GPU power
-- (W, summed over the host's GPUs) during the level; NULL where the host reported no power.
ALTER TABLE levels ADD COLUMN gpu_power_w DOUBLE PRECISION;
