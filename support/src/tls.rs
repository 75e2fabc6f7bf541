//! TLS material for mTLS between controller and agents.
