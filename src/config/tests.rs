//! Settings from TOML and overrides, resolved and validated; every error names its key.

use super::load::{from_toml, Flags};
use std::path::Path;

use super::*;

fn parse(toml: &str) -> Result<Config, ConfigError> {
    from_toml(toml, &Flags::new())
}

#[test]
fn defaults_are_valid_and_bad_values_name_their_key() {
    assert_eq!(Config::new("db:3306").validate(), Ok(()));
    assert_eq!(Config::new("[::1]:3306").validate(), Ok(()));
    assert_eq!(Config::new("/run/mysqld/mysqld.sock").validate(), Ok(()));
    type Breaks = fn(&mut Config);
    let table: [(&str, Breaks); 12] = [
        ("primary", |c| c.primary = "db".into()),
        ("primary", |c| c.primary = "db:0".into()),
        ("primary", |c| c.primary = "run/mysqld.sock".into()),
        ("limits.max_connections", |c| c.limits.max_connections = 0),
        ("limits.max_packet_size", |c| {
            c.limits.max_packet_size = 2 << 30
        }),
        ("limits.max_handshake_packet_size", |c| {
            c.limits.max_handshake_packet_size = 2 << 30
        }),
        ("timeouts.client_handshake", |c| {
            c.timeouts.client_handshake = Duration::ZERO
        }),
        ("timeouts.client_read", |c| {
            c.timeouts.client_read = Duration::ZERO
        }),
        ("timeouts.client_write", |c| {
            c.timeouts.client_write = Duration::ZERO
        }),
        ("durability.quorum", |c| c.durability.quorum = 0),
        ("durability.ack_timeout", |c| {
            c.durability.ack_timeout = Duration::ZERO
        }),
        ("admin_listen", |c| c.admin_listen = c.listen),
    ];
    for (key, breaks) in table {
        let mut config = Config::new("db:3306");
        breaks(&mut config);
        match config.validate() {
            Err(ConfigError::Invalid { key: got, .. } | ConfigError::Value { key: got, .. }) => {
                assert_eq!(got, key)
            }
            other => panic!("{key}: {other:?}"),
        }
    }
}

const FULL: &str = r#"
listen = "0.0.0.0:3307"
primary = "db1:3306"
admin_listen = "127.0.0.1:9104"
log_level = "strongsync=debug"
shutdown_grace = "15s"
worker_threads = 1
compression_level = 3

[tls]
cert = "/etc/strongsync/tls.crt"
key = "/etc/strongsync/tls.key"

[limits]
max_connections = 100
max_packet_size = 67108864
max_handshake_packet_size = 65536
max_held_response_bytes = 1048576

[timeouts]
primary_connect = "2s"
client_handshake = "250ms"
client_read = "5s"
client_write = "2m"

[durability]
quorum = 2
ack_timeout = "3s"
on_timeout = "error"
without_quorum = "immediate"
ack_nudge_after = "500ms"
gtid_index_capacity = 1000
passthrough = false
quorum_zones = 2
cross_zone = true
primary_zone = "dc1"
session_quorum_floor = 1
session_quorum_max = 3
async_replicas = "immediate"

[[replica]]
server_id = 2
zone = "dc1"

[[replica]]
server_id = 3
zone = "dc2"
labels = { rack = "r7", role = "dr" }
"#;

fn error_of(toml: &str) -> String {
    match parse(toml) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_full_file_resolves_and_round_trips() {
    let config = parse(FULL).unwrap();
    assert_eq!(config.primary, "db1:3306");
    assert_eq!(config.limits.max_connections, 100);
    assert_eq!(config.timeouts.client_handshake, Duration::from_millis(250));
    assert_eq!(config.timeouts.client_read, Duration::from_secs(5));
    assert_eq!(config.timeouts.client_write, Duration::from_secs(120));
    assert_eq!(config.durability.quorum, 2);
    assert_eq!(config.durability.on_timeout, OnTimeout::Error);
    assert_eq!(config.durability.without_quorum, WithoutQuorum::Immediate);
    assert_eq!(config.shutdown_grace, Duration::from_secs(15));
    assert_eq!(config.worker_threads, Some(1));
    assert_eq!(config.compression_level, 3);
    assert!(config.tls.files().unwrap().is_some());
    assert_eq!(
        config.durability.rule(),
        crate::durability::QuorumRule {
            count: 2,
            zones: 2,
            cross_zone: true
        }
    );
    assert_eq!(config.durability.session_floor(), 1);
    assert_eq!(config.durability.async_replicas, AsyncReplicas::Immediate);
    let topology = config.topology().unwrap();
    assert_eq!(topology.zone_of(3).as_deref(), Some("dc2"));
    assert_eq!(topology.replicas[&3].labels["role"], "dr");
    assert_eq!(topology.primary_zone.as_deref(), Some("dc1"));
    let printed = config.to_toml();
    let again = parse(&printed).unwrap();
    assert_eq!(again, config, "{printed}");
}

#[test]
fn defaults_fill_what_the_file_leaves_out() {
    let config = parse("primary = \"db:3306\"").unwrap();
    assert_eq!(config, Config::new("db:3306"));
}

#[test]
fn command_line_settings_win() {
    let cli: Flags = vec![
        ("primary", "db2:3306".into()),
        ("durability.quorum", "3".into()),
    ];
    let config = from_toml(FULL, &cli).unwrap();
    assert_eq!(
        (config.primary.as_str(), config.durability.quorum),
        ("db2:3306", 3)
    );
    assert_eq!(
        config.durability.ack_timeout,
        Duration::from_secs(3),
        "the file still counts"
    );
}

#[test]
fn bad_files_are_refused_naming_the_key() {
    // (file, words the message must contain)
    let table = [
        (
            "primary = \"db:3306\"\nquorom = 2",
            vec!["unknown field", "quorom"],
        ),
        (
            "primary = \"db:3306\"\n[durability]\nquorom = 2",
            vec!["unknown field", "durability.quorom"],
        ),
        (
            "primary = \"db:3306\"\nworker_threads = 0",
            vec!["worker_threads", "between 1 and 1024"],
        ),
        (
            "primary = \"db:3306\"\n[durability]\nack_timeout = \"-5s\"",
            vec!["durability.ack_timeout"],
        ),
        (
            "primary = \"db:3306\"\n[durability]\nquorum = 0",
            vec!["durability.quorum", "between 1 and 64"],
        ),
        (
            "primary = \"db:3306\"\n[durability]\nquorum = -1",
            vec!["durability.quorum", "negative"],
        ),
        (
            "primary = \"db:3306\"\n[durability]\non_timeout = \"panic\"",
            vec!["durability.on_timeout", "degrade, block or error"],
        ),
        (
            "primary = \"db:3306\"\n[timeouts]\nclient_handshake = \"0s\"",
            vec!["timeouts.client_handshake"],
        ),
        (
            "primary = \"db:3306\"\n[timeouts]\nclient_read = \"0s\"",
            vec!["timeouts.client_read", "greater than zero"],
        ),
        (
            "primary = \"db:3306\"\n[timeouts]\nclient_write = \"soon\"",
            vec!["timeouts.client_write", "not a duration"],
        ),
        (
            "primary = \"db:3306\"\nlisten = \"nowhere\"",
            vec!["listen"],
        ),
        (
            "primary = \"db:3306\"\n[tls]\ncert = \"a.pem\"",
            vec!["tls.key"],
        ),
        (
            "primary = \"db:3306\"\n[cluster]\nendpoints = [\"http://e:2379\"]\nlease_ttl = \"4s\"\nlease_margin = \"2s\"",
            vec!["cluster.lease_margin", "half of cluster.lease_ttl"],
        ),
        (
            "primary = \"db:3306\"\n[failover]\nstate_file = \"/s.json\"\n[cluster]\nendpoints = [\"http://e:2379\"]",
            vec!["failover.state_file", "keeps its state in etcd"],
        ),
        (
            "primary = \"db:3306\"\n[cluster]\nlease_ttl = \"1s\"",
            vec!["cluster.lease_ttl", "at least 2s"],
        ),
        (
            "primary = \"db:3306\"\n[cluster]\nendpoints = [7]",
            vec!["cluster.endpoints", "non-empty strings"],
        ),
        (
            "primary = \"db:3306\"\nprimary_tls = \"verify_ca\"",
            vec!["primary_tls", "primary_tls_ca"],
        ),
        ("listen = \"127.0.0.1:1\"", vec!["missing setting primary"]),
        (
            "primary = \"db:3306\"\n[limits]\nmax_connections = \"many\"",
            vec!["max_connections"],
        ),
        ("primary = ", vec!["TOML parse error"]),
    ];
    for (toml, words) in table {
        let message = error_of(toml);
        for word in words {
            assert!(
                message.contains(word),
                "{toml:?}: {message:?} lacks {word:?}"
            );
        }
    }
}

#[test]
fn a_bad_value_is_a_typed_problem_that_reads_as_a_sentence() {
    let table: [(&str, ValueError, &str); 4] = [
        (
            "[durability]\nquorum = 0",
            ValueError::NotBetween { n: 0, min: 1, max: 64 },
            "invalid value for durability.quorum: 0 is not between 1 and 64 (to relay without waiting, set durability.passthrough)",
        ),
        (
            "[durability]\non_timeout = \"panic\"",
            ValueError::Text {
                text: "panic".into(),
                source: TextError::Word(UnknownWord {
                    expected: &["degrade", "block", "error"],
                    got: "panic".into(),
                }),
            },
            "invalid value for durability.on_timeout: \"panic\": expected degrade, block or error, got \"panic\"",
        ),
        (
            "worker_threads = \"many\"",
            ValueError::Kind {
                expected: "a whole number",
                found: "string",
            },
            "invalid value for worker_threads: expected a whole number, not string",
        ),
        (
            "[timeouts]\nclient_read = \"0s\"",
            ValueError::Zero,
            "invalid value for timeouts.client_read: must be greater than zero",
        ),
    ];
    for (toml, want, message) in table {
        let error = parse(&format!("primary = \"db:3306\"\n{toml}")).unwrap_err();
        assert_eq!(error.to_string(), message);
        assert!(
            matches!(&error, ConfigError::Value { problem, .. } if *problem == want),
            "{toml}: {error:?}"
        );
    }
}

#[test]
fn the_shipped_example_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/strongsync.toml");
    let config = load::load(Some(&path), &Flags::new(), &Flags::new()).unwrap();
    assert_eq!(config.durability.quorum, 1);
}

#[test]
fn the_probe_account_takes_its_password_from_a_file_or_the_settings_and_never_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probe-password");
    std::fs::write(&file, "s3cret\n").unwrap();
    let toml = format!(
        "primary = \"db:3306\"\n[probe]\nuser = \"strongsync\"\npassword_file = {:?}",
        file.display().to_string()
    );
    let config = parse(&toml).unwrap();
    let probe = config.probe.account().unwrap().expect("configured");
    assert_eq!(
        (probe.user.as_str(), probe.password.as_str()),
        ("strongsync", "s3cret")
    );
    let printed = config.to_toml();
    assert!(
        printed.contains("password_file") && !printed.contains("s3cret"),
        "{printed}"
    );
    assert_eq!(parse(&printed).unwrap(), config);
    assert!(!format!("{config:?}").contains("s3cret"));

    let inline = "primary = \"db:3306\"\n[probe]\nuser = \"strongsync\"\npassword = \"s3cret\"";
    let config = parse(inline).unwrap();
    assert!(!format!("{config:?}").contains("s3cret"));
    assert!(!config.to_toml().contains("s3cret"));

    // A password from the command line replaces the file's password file.
    let over: Flags = vec![("probe.password", "other".into())];
    let config = from_toml(&toml, &over).unwrap();
    assert_eq!(config.probe.account().unwrap().unwrap().password, "other");
}

#[test]
fn a_probe_account_that_cannot_work_names_its_key() {
    let table = [
        ("[probe]\npassword = \"x\"", "probe.user"),
        ("[probe]\nuser = \"u\"", "probe.password_file"),
        (
            "[probe]\nuser = \"u\"\npassword = \"x\"\npassword_file = \"/p\"",
            "probe.password",
        ),
        (
            "[probe]\nuser = \"u\"\npassword_file = \"/nonexistent/p\"",
            "probe.password_file",
        ),
    ];
    for (section, key) in table {
        let message = error_of(&format!("primary = \"db:3306\"\n{section}"));
        assert!(message.contains(key), "{section:?}: {message}");
    }
}

#[test]
fn visibility_quorum_needs_the_probe_account_and_other_values_are_refused() {
    let base = "primary = \"db:3306\"\n[durability]\n";
    let config = parse(base).unwrap();
    assert_eq!(config.durability.visibility, Visibility::Commit);
    let error = error_of(&format!("{base}visibility = \"quorum\""));
    assert!(
        error.contains("durability.visibility") && error.contains("[probe]"),
        "{error}"
    );
    let error = error_of(&format!("{base}visibility = \"sync\""));
    assert!(error.contains("durability.visibility"), "{error}");
    let with_probe =
        format!("{base}visibility = \"quorum\"\n[probe]\nuser = \"strongsync\"\npassword = \"x\"");
    let config = parse(&with_probe).unwrap();
    assert_eq!(config.durability.visibility, Visibility::Quorum);
    let shown = config.to_toml();
    assert!(shown.contains("visibility = \"quorum\""), "{shown}");
    let snapshot = with_probe.replace("\"quorum\"", "\"snapshot\"");
    let config = parse(&snapshot).unwrap();
    assert_eq!(config.durability.visibility, Visibility::Snapshot);
    assert!(config.durability.reads_wait() && config.durability.snapshot_reads());
    let error = error_of(&format!("{base}visibility = \"snapshot\""));
    assert!(error.contains("[probe]"), "{error}");
}

#[test]
fn a_rule_the_named_replicas_can_never_meet_is_refused() {
    let with = |durability: &str, replicas: &str| {
        format!("primary = \"db:3306\"\n[durability]\n{durability}\n{replicas}")
    };
    let two_zones =
        "[[replica]]\nserver_id = 2\nzone = \"a\"\n[[replica]]\nserver_id = 3\nzone = \"b\"\n";
    let one_zone =
        "[[replica]]\nserver_id = 2\nzone = \"a\"\n[[replica]]\nserver_id = 3\nzone = \"a\"\n";
    let table: [(String, &str); 10] = [
        (
            with("quorum = 2\nquorum_zones = 2", one_zone),
            "[[replica]] names 1 (a)",
        ),
        (with("quorum = 2\nquorum_zones = 2", ""), "names 0 (none)"),
        (
            with("quorum = 1\nquorum_zones = 2", two_zones),
            "raise durability.quorum to 2",
        ),
        (
            with("cross_zone = true", two_zones),
            "needs durability.primary_zone",
        ),
        (
            with("cross_zone = true\nprimary_zone = \"a\"", one_zone),
            "no [[replica]] has a zone other than the primary's",
        ),
        (
            with("quorum = 2\nsession_quorum_floor = 3", ""),
            "above durability.quorum",
        ),
        (with("session_quorum_max = 65", ""), "at most 64"),
        (
            with(
                "",
                "[[replica]]\nserver_id = 2\n[[replica]]\nserver_id = 2\n",
            ),
            "server_id 2 is named twice",
        ),
        (
            with("async_replicas = \"later\"", ""),
            "after_quorum or immediate",
        ),
        (
            "primary = \"db:3306\"\ncompression_level = 10".to_owned(),
            "compression_level: 10 is not between 0 and 9",
        ),
    ];
    for (toml, want) in table {
        let error = error_of(&toml);
        assert!(error.contains(want), "{toml}\n-> {error}");
    }
    for ok in [
        with("quorum = 2\nquorum_zones = 2", two_zones),
        with("cross_zone = true\nprimary_zone = \"a\"", two_zones),
        with("quorum = 2\nsession_quorum_floor = 0", ""),
    ] {
        parse(&ok).unwrap();
    }
}
