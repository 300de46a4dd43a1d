//! Failover control without servers: what the state file gives back at start, what it refuses,
//! and what a call says when nothing is persisted.

use super::*;
use crate::durability::Persisted;

fn config_with(path: Option<PathBuf>) -> Config {
    let mut config = Config::new("10.0.0.1:3306");
    config.failover.state_file = path;
    config
}

fn start(config: &Config) -> Result<(Arc<Control>, Arc<Durability>), ControlStartError> {
    let durability = Durability::new(config.durability.clone());
    let control = Control::start(
        config,
        Arc::clone(&durability),
        Arc::new(Metrics::new()),
        None,
    )?;
    Ok((control, durability))
}

#[tokio::test]
async fn the_state_file_wins_over_the_configured_primary_and_a_retired_one_stays_retired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let known = |address: &str, server_id| KnownPrimary {
        address: address.into(),
        identity: Some(ServerIdentity::MariaDb { server_id }),
    };
    State {
        epoch: 3,
        primary: known("10.0.0.2:3306", 2),
        retired: vec![known("10.0.0.1:3306", 1)],
        durability: Persisted {
            fence: Some(Fence { epoch: 3 }),
            ..Persisted::default()
        },
    }
    .save(&path)
    .unwrap();
    // An old config file still names the first primary.
    let (control, durability) = start(&config_with(Some(path))).unwrap();
    assert_eq!(
        (control.primary().as_str(), control.epoch()),
        ("10.0.0.2:3306", 3)
    );
    assert_eq!(
        (
            durability.gate().epoch_number(),
            durability.gate().epoch().primary()
        ),
        (3, "10.0.0.2:3306")
    );
    assert!(durability.gate().fenced());
    let back = Follow {
        primary: "10.0.0.1:3306".into(),
        ..Follow::default()
    };
    assert!(matches!(
        control.follow(&back).await,
        Err(ControlError::Retired { addr, retired }) if addr == "10.0.0.1:3306" && retired.contains("server_id 1")
    ));
    // Nor is the fenced primary of this epoch followed again without the operator's word.
    let same = Follow {
        primary: "10.0.0.2:3306".into(),
        ..Follow::default()
    };
    assert!(matches!(
        control.follow(&same).await,
        Err(ControlError::Retired { .. })
    ));
    // Reinstating takes it off the list (and only what is on it).
    assert!(control.reinstate("10.0.0.1:3306").await.unwrap());
    assert!(control.retired().is_empty());
    let refused = control.reinstate("10.0.0.9:3306").await.unwrap_err();
    assert!(matches!(refused, ControlError::NotRetired { .. }));
    assert_eq!(
        refused.to_string(),
        "refused: 10.0.0.9:3306 is not a retired primary"
    );
}

/// A state file that is configured and missing, truncated or garbage stops the start, naming
/// the file; a new deployment creates it first.
#[tokio::test]
async fn a_missing_or_unreadable_state_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let config = config_with(Some(path.clone()));
    let error = start(&config).err().expect("refused").to_string();
    assert!(
        error.contains(&path.display().to_string()) && error.contains("strongsync init-state"),
        "{error}"
    );
    for text in ["", "{\"version\": 2, \"epo", "garbage"] {
        std::fs::write(&path, text).unwrap();
        let error = start(&config).err().expect("refused").to_string();
        assert!(
            error.contains(&path.display().to_string()) && error.contains("unreadable"),
            "{text:?}: {error}"
        );
    }
    std::fs::remove_file(&path).unwrap();
    assert_eq!(init_state(&config).unwrap(), path);
    let (control, durability) = start(&config).unwrap();
    assert_eq!(
        (control.epoch(), control.primary()),
        (1, config.primary.clone())
    );
    assert!(!durability.gate().fenced());
    assert!(matches!(
        init_state(&config),
        Err(ControlStartError::Exists(_))
    ));
}

/// Without a state file every change says that nothing was persisted.
#[tokio::test]
async fn without_a_state_file_a_fence_says_nothing_was_persisted() {
    let (control, durability) = start(&config_with(None)).unwrap();
    let report = control.fence("test").await.unwrap();
    assert!(report.newly && !report.persisted);
    assert!(durability.gate().fenced());
    assert!(!control.persists());
}

/// The fence is in the state file before the drain ends: a proxy killed during the drain (a
/// replica pipe that does not close) comes back fenced.
#[tokio::test(flavor = "multi_thread")]
async fn the_fence_is_written_before_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.json");
    let mut config = config_with(Some(path.clone()));
    config.failover.fence_drain = Duration::from_secs(30);
    State::create(&path, &config.primary).unwrap();
    let (control, durability) = start(&config).unwrap();
    // A pipe that stays open keeps the drain waiting.
    let pipe = durability
        .admit(
            1,
            2,
            "127.0.0.1:1".parse().unwrap(),
            true,
            Default::default(),
        )
        .unwrap();
    let fencing = tokio::spawn({
        let control = Arc::clone(&control);
        async move { control.fence("test").await }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let kept = State::load(&path).unwrap();
        if kept.durability.fence == Some(Fence { epoch: 1 }) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fence was not written while draining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!fencing.is_finished(), "still draining");
    drop(pipe);
    fencing.await.unwrap().unwrap();
}
