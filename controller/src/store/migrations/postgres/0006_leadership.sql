-- fleetbench controller store, version 6 (identical on both backends): who leads the
-- controllers sharing this store. One row; `epoch` grows by one at every takeover and fences
-- every write (a write checks it in its own transaction, see store/mod.rs). `address` is the
-- leader's API URL, which a standby names to clients.
CREATE TABLE leadership (
    id BIGINT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder TEXT NOT NULL,
    address TEXT NOT NULL,
    since_unix_ms BIGINT NOT NULL
);
INSERT INTO leadership (id, epoch, holder, address, since_unix_ms) VALUES (1, 0, '', '', 0);
