//! The `strongsync` binary's command line as a new user meets it: flags named after their keys,
//! words in MySQL's and clap's spellings, switches that never take the next word, `--config`
//! only where it is read, exit codes, and `check-config` opening every file a start would.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use support::admin::{state_file, token_file};
use support::certs::TestCerts;
use support::proxy::{free_port, run_strongsync, ProxyProcess};

/// The binary's exit code for a configuration that cannot work.
const EXIT_CONFIG: i32 = 64;

/// Writes `text` to `dir/name` and returns its path as text.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The value `check-config` prints for `key` in `[section]` (`""`: the top level).
fn printed(stdout: &str, section: &str, key: &str) -> String {
    let table: toml::Table = stdout.parse().expect("check-config prints TOML");
    let table = if section.is_empty() {
        &table
    } else {
        table[section].as_table().unwrap()
    };
    table[key].to_string()
}

#[test]
fn every_flag_is_its_key_with_dashes_and_so_is_its_variable() {
    let help = run_strongsync(&["--help"]);
    assert!(help.success(), "{help}");
    let mut flags = 0;
    for setting in strongsync::Config::settings() {
        let Some(flag) = setting.flag() else { continue };
        assert_eq!(flag, setting.key.replace(['.', '_'], "-"));
        let shown = [" ", "[="].map(|after| format!("--{flag}{after}"));
        assert!(
            shown.iter().any(|s| help.stdout.contains(s.as_str())),
            "--{flag}:\n{help}"
        );
        let env = format!("STRONGSYNC_{}", flag.replace('-', "_").to_uppercase());
        assert!(help.stdout.contains(&env), "{env}:\n{help}");
        flags += 1;
    }
    assert!(flags > 30, "{flags} flags");
    // The settings flags come with the commands that read a configuration, after them too.
    for command in ["check-config", "init-state"] {
        let help = run_strongsync(&[command, "--help"]);
        assert!(help.stdout.contains("--durability-quorum"), "{help}");
    }
}

#[test]
fn words_are_taken_in_mysqls_and_claps_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", "primary = \"db:3306\"\n");
    for (flag, given, section, key, want) in [
        ("--primary-tls", "VERIFY_CA", "", "primary_tls", "verify_ca"),
        ("--primary-tls", "verify-ca", "", "primary_tls", "verify_ca"),
        (
            "--primary-tls",
            "Verify_Identity",
            "",
            "primary_tls",
            "verify_identity",
        ),
        (
            "--durability-async-replicas",
            "after-quorum",
            "durability",
            "async_replicas",
            "after_quorum",
        ),
        (
            "--durability-on-timeout",
            "Degrade",
            "durability",
            "on_timeout",
            "degrade",
        ),
        (
            "--durability-visibility",
            "COMMIT",
            "durability",
            "visibility",
            "commit",
        ),
    ] {
        let out = run_strongsync(&[
            "check-config",
            "--skip-files",
            &file,
            flag,
            given,
            "--primary-tls-ca",
            "/elsewhere/ca.pem",
        ]);
        assert!(out.success(), "{flag} {given}: {out}");
        assert_eq!(printed(&out.stdout, section, key), format!("\"{want}\""));
    }
    // The file takes them so too, and a word that is none of them names the key.
    let upper = write(
        dir.path(),
        "upper.toml",
        "primary = \"db:3306\"\n[durability]\non_timeout = \"BLOCK\"\n",
    );
    let out = run_strongsync(&["check-config", &upper]);
    assert_eq!(
        printed(&out.stdout, "durability", "on_timeout"),
        "\"block\""
    );
    let out = run_strongsync(&["check-config", &file, "--durability-on-timeout", "retry"]);
    assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{out}");
    assert!(
        out.stderr.contains("durability.on_timeout")
            && out.stderr.contains("degrade, block or error"),
        "{out}"
    );
}

#[test]
fn a_switch_takes_its_value_after_an_equals_sign_never_the_next_word() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", "primary = \"db:3306\"\n");
    // Before the command: the switch alone, and the command is still the command.
    let out = run_strongsync(&["--sharing-enabled", "check-config", &file]);
    assert!(out.success(), "{out}");
    assert_eq!(printed(&out.stdout, "sharing", "enabled"), "true");
    for (given, want) in [
        ("--sharing-enabled=false", "false"),
        ("--sharing-enabled=ON", "true"),
    ] {
        let out = run_strongsync(&["check-config", &file, given]);
        assert!(out.success(), "{out}");
        assert_eq!(printed(&out.stdout, "sharing", "enabled"), want, "{given}");
    }
    // A value as the next word is a word of its own, not the switch's.
    let out = run_strongsync(&["check-config", &file, "--sharing-enabled", "false"]);
    assert_eq!(out.status.code(), Some(2), "{out}");
}

#[test]
fn the_former_names_are_still_taken_with_a_warning_and_the_new_ones_win() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", "primary = \"db:3306\"\n");
    let out = run_strongsync(&["--quorum", "2", "--no-tls", "check-config", &file]);
    assert!(out.success(), "{out}");
    assert_eq!(printed(&out.stdout, "durability", "quorum"), "2");
    assert_eq!(printed(&out.stdout, "tls", "disabled"), "true");
    assert!(
        out.stderr.contains("--quorum is now --durability-quorum"),
        "{out}"
    );
    assert!(
        out.stderr.contains("--no-tls is now --tls-disabled"),
        "{out}"
    );

    let mut command = support::proxy::strongsync_command(&["check-config", &file]);
    let run = |command: &mut std::process::Command| {
        let out = command.output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (stdout, stderr) = run(command.env("STRONGSYNC_QUORUM", "3"));
    assert_eq!(printed(&stdout, "durability", "quorum"), "3", "{stderr}");
    assert!(
        stderr.contains(
            "STRONGSYNC_QUORUM is read for now; rename it to STRONGSYNC_DURABILITY_QUORUM"
        ),
        "{stderr}"
    );
    let (stdout, stderr) = run(command.env("STRONGSYNC_DURABILITY_QUORUM", "4"));
    assert_eq!(printed(&stdout, "durability", "quorum"), "4", "{stderr}");
    assert!(stderr.contains("STRONGSYNC_QUORUM is not read"), "{stderr}");
}

#[test]
fn a_flag_wins_over_the_environment_before_the_command_or_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", "primary = \"db:3306\"\n");
    for args in [
        vec!["--durability-quorum", "2", "check-config", &file],
        vec!["check-config", &file, "--durability-quorum", "2"],
    ] {
        let out = support::proxy::strongsync_command(&args)
            .env("STRONGSYNC_DURABILITY_QUORUM", "3")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {stdout}");
        assert_eq!(printed(&stdout, "durability", "quorum"), "2", "{args:?}");
    }
    // After the command wins over before it.
    let out = run_strongsync(&[
        "--durability-quorum",
        "2",
        "check-config",
        &file,
        "--durability-quorum",
        "4",
    ]);
    assert_eq!(printed(&out.stdout, "durability", "quorum"), "4", "{out}");
}

#[test]
fn config_is_taken_only_where_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "s.toml", "primary = \"db:3306\"\n");
    let other = write(
        dir.path(),
        "other.toml",
        "primary = \"db:3306\"\n[durability]\nquorum = 7\n",
    );
    // Before check-config it would be ignored for the file checked: refused, saying where it goes.
    let out = run_strongsync(&["--config", &other, "check-config", &file]);
    assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{out}");
    assert!(out.stderr.contains("give it after the command"), "{out}");
    let check = run_strongsync(&["check-config", "--help"]);
    assert!(!check.stdout.contains("--config"), "{check}");
    // The operators' commands read it for the admin port, and say so, not SIGHUP's part.
    for command in ["status", "fence", "outcome", "init-state"] {
        let help = run_strongsync(&[command, "--help"]);
        assert!(help.stdout.contains("--config <FILE>"), "{help}");
        assert!(!help.stdout.contains("SIGHUP"), "{help}");
    }
    let proxy = run_strongsync(&["--help"]);
    assert!(proxy.stdout.contains("SIGHUP re-reads it"), "{proxy}");
}

#[test]
fn outcome_tells_an_unknown_gtid_by_its_exit_code() {
    // A proxy alone, its primary nowhere: what it knows of commits is nothing.
    let (proxy, _) = ProxyProcess::passthrough("127.0.0.1:1", &[]);
    let admin = proxy.admin_addr().unwrap().to_string();
    let out = run_strongsync(&["outcome", "--admin-listen", &admin, "0-1-42"]);
    assert_eq!(out.status.code(), Some(3), "{out}");
    assert!(out.stdout.contains("0-1-42: unknown"), "{out}");
    // The former flag still reaches it.
    let out = run_strongsync(&["outcome", "--admin", &admin, "0-1-42"]);
    assert_eq!(out.status.code(), Some(3), "{out}");
    // An admin port that does not answer is a failed call, not an unknown GTID.
    let nowhere = SocketAddr::from(([127, 0, 0, 1], free_port())).to_string();
    let out = run_strongsync(&["outcome", "--admin-listen", &nowhere, "0-1-42"]);
    assert_eq!(out.status.code(), Some(1), "{out}");
}

#[test]
fn help_gives_every_exit_code() {
    let help = run_strongsync(&["--help"]);
    for code in ["  0 ", "  1 ", "  2 ", "  3 ", "  4 ", "  64 "] {
        let listed = help.stdout.split_once("Exit codes:").unwrap().1;
        assert!(listed.contains(code), "{code:?}:\n{help}");
    }
}

/// A config whose every file is there and right: the control the broken ones differ from.
struct Files {
    dir: tempfile::TempDir,
    certs: TestCerts,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let certs = TestCerts::generate(&["localhost"]);
        std::fs::write(dir.path().join("password"), "s3cret\n").unwrap();
        token_file(dir.path(), "a-token-of-more-than-16-bytes");
        state_file(dir.path(), "db:3306");
        Files { dir, certs }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The config with `change(key, value)` applied to its lines.
    fn config(&self, replace: &[(&str, &str)]) -> String {
        let mut text = format!(
            "primary = \"db:3306\"\nprimary_tls = \"verify_ca\"\nprimary_tls_ca = {:?}\n\
             [tls]\ncert = {:?}\nkey = {:?}\n\
             [probe]\nuser = \"probe\"\npassword_file = {:?}\n\
             [failover]\nadmin_token_file = {:?}\nstate_file = {:?}\n",
            self.certs.ca.display().to_string(),
            self.certs.cert.display().to_string(),
            self.certs.key.display().to_string(),
            self.path("password"),
            self.path("token"),
            self.path("state.json"),
        );
        for (from, to) in replace {
            assert!(text.contains(from), "{from}");
            text = text.replace(from, to);
        }
        write(self.dir.path(), "s.toml", &text)
    }
}

#[test]
fn check_config_opens_every_file_a_start_would_and_refuses_what_a_start_refuses() {
    let files = Files::new();
    let good = files.config(&[]);
    let out = run_strongsync(&["check-config", &good]);
    assert!(out.success(), "{out}");
    for key in [
        "tls.cert",
        "tls.key",
        "primary_tls_ca",
        "probe.password_file",
        "failover.admin_token_file",
        "failover.state_file",
    ] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("# {key} = "))
                    && l.ends_with(": checked as a start would")),
            "{key}:\n{out}"
        );
    }
    let short = write(files.dir.path(), "short", "6bytes\n");
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = files.path("missing");
    let cert = files.certs.cert.display().to_string();
    let ca = files.certs.ca.display().to_string();
    let state = files.path("state.json");
    let token = files.path("token");
    let password = files.path("password");
    // (what is wrong, the file it names instead of the right one, what the refusal names)
    let cases = [
        (
            "a missing tls.cert",
            cert.as_str(),
            missing.as_str(),
            "missing",
        ),
        (
            "a tls.cert that is no certificate",
            cert.as_str(),
            password.as_str(),
            "no PEM certificate",
        ),
        (
            "a missing primary_tls_ca",
            ca.as_str(),
            missing.as_str(),
            "missing",
        ),
        (
            "a short token others may read",
            token.as_str(),
            short.as_str(),
            "failover.admin_token_file",
        ),
        (
            "a missing state file",
            state.as_str(),
            missing.as_str(),
            "init-state",
        ),
        (
            "a missing password file",
            password.as_str(),
            missing.as_str(),
            "probe.password_file",
        ),
    ];
    for (what, from, to, named) in cases {
        let file = files.config(&[(from, to)]);
        let out = run_strongsync(&["check-config", &file]);
        assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{what}: {out}");
        assert!(out.stderr.contains(named), "{what} names {named:?}: {out}");
        // The same settings pass when the files are not opened, and the files are listed so.
        let out = run_strongsync(&["check-config", "--skip-files", &file]);
        assert!(out.success(), "{what}, --skip-files: {out}");
        assert!(out.stdout.contains("not opened (--skip-files)"), "{out}");
        // And the proxy refuses to start on it, as check-config said, before it listens.
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let started = run_strongsync(&["--config", &file, "--listen", &listen.to_string()]);
        assert_eq!(
            started.status.code(),
            Some(EXIT_CONFIG),
            "{what}: {started}"
        );
        assert!(!started.stderr.contains("listening"), "{what}: {started}");
    }
}

/// A new user's first start: the state file named in a directory that does not exist, with
/// no certificate configured (strongsync would make one beside the state file). The refusal
/// names the state file, not the certificate's key, and comes before a port is bound.
#[test]
fn a_state_file_in_a_missing_directory_is_named_before_anything_listens() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("no-such-directory/state.json");
    let file = write(
        dir.path(),
        "c.toml",
        &format!(
            "primary = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [failover]\nstate_file = \"{}\"\n",
            state.display()
        ),
    );
    for args in [vec!["--config", &file], vec!["check-config", &file]] {
        let out = run_strongsync(&args);
        assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{args:?}: {out}");
        assert!(
            out.stderr.contains(&state.display().to_string()),
            "{args:?} names the state file: {out}"
        );
        assert!(
            !out.stderr.contains("strongsync-key.pem"),
            "{args:?}: {out}"
        );
        assert!(!out.stderr.contains("listening"), "{args:?}: {out}");
    }
    assert!(
        !dir.path().join("no-such-directory").exists(),
        "nothing made"
    );
}

#[test]
fn an_instance_of_a_cluster_must_say_its_name_and_address() {
    let dir = tempfile::tempdir().unwrap();
    let base = "primary = \"db:3306\"\nlisten = \"0.0.0.0:3307\"\n\
                [cluster]\nendpoints = [\"http://127.0.0.1:1\"]\n";
    for (extra, missing) in [
        ("", "cluster.name"),
        ("name = \"db1\"\n", "cluster.advertise"),
        ("advertise = \"10.0.0.1:3307\"\n", "cluster.name"),
    ] {
        let file = write(dir.path(), "c.toml", &format!("{base}{extra}"));
        let out = run_strongsync(&["check-config", &file]);
        assert_eq!(out.status.code(), Some(EXIT_CONFIG), "{out}");
        assert!(out.stderr.contains(missing), "{missing}: {out}");
    }
    let named = write(
        dir.path(),
        "c.toml",
        &format!("{base}name = \"db1\"\nadvertise = \"10.0.0.1:3307\"\n"),
    );
    let out = run_strongsync(&["check-config", &named]);
    assert!(out.success(), "{out}");
    // Creating the cluster's state needs no instance's name (it fails here only for want of
    // an etcd, after the settings passed).
    let out = run_strongsync(&[
        "init-state",
        "--config",
        &file_without_name(dir.path(), base),
    ]);
    assert!(!out.stderr.contains("cluster.name"), "{out}");
}

fn file_without_name(dir: &Path, base: &str) -> String {
    write(dir, "unnamed.toml", base)
}
