-- fleetbench controller store, version 5 (identical on both backends): the agent lease epoch
-- each level was measured under (agent.v1 "Leases and fencing"). A level is stored only while
-- its trial attempt holds that epoch; 0 for levels stored before version 5.
ALTER TABLE levels ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
