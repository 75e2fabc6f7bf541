//! Tuning searches over engine flags.
