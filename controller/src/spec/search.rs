//! `[search]`: a tuning search space over flags, its objective and strategy.
