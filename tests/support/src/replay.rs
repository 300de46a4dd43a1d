//! A randomised test's seed and length from the environment: `LEDGER_SEED` replays a run's
//! choices, `STRONGSYNC_LEDGER_KILLS` makes a run longer than CI's.

/// The seed for a test's random choices: `LEDGER_SEED` to replay a run, else the clock; printed
/// with `what` so that a failing run can be replayed.
pub fn seed(what: &str) -> u64 {
    let seed = std::env::var("LEDGER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{what}: seed {seed} (LEDGER_SEED={seed} replays these choices)");
    seed
}

/// Kills per test: `STRONGSYNC_LEDGER_KILLS` for a longer run than CI's `default`.
pub fn kills(default: u64) -> u64 {
    std::env::var("STRONGSYNC_LEDGER_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}
