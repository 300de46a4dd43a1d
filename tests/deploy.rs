//! The files in `deploy/`, checked without servers: the alert rules and the Grafana dashboard
//! parse and their PromQL is valid (that the metrics they query exist is checked against a
//! live `/metrics` in `operations.rs`), the Prometheus scrape config points at the rules, the
//! Kubernetes manifest's strongsync config is accepted by the binary and its probes use the
//! admin port, and the systemd unit fits the binary's signals and exit codes.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use serde_yaml_ng::Value;
use support::deploy::{
    alert_rules, container_args, dashboard_queries, deploy_path, image_tag, kubernetes_mode,
    metrics_of, read, DASHBOARD,
};
use support::proxy::run_strongsync;

/// `shutdown_grace` of deploy/strongsync.toml.
fn example_shutdown_grace() -> Duration {
    let config: toml::Table = read("strongsync.toml").parse().expect("TOML");
    humantime::parse_duration(config["shutdown_grace"].as_str().unwrap()).unwrap()
}

#[test]
fn alert_rules_parse_and_cover_what_an_operator_is_paged_for() {
    let rules = alert_rules();
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    for wanted in [
        "StrongsyncDegraded",
        "StrongsyncNoQuorum",
        "StrongsyncParkedSessionsPilingUp",
        "StrongsyncAckLatencyHigh",
        "StrongsyncReplicaLagging",
        "StrongsyncPrimaryUnreachable",
        "StrongsyncStateFileWritesFailing",
        "StrongsyncLeaseRenewalsFailing",
        "StrongsyncPoolWaitTimeouts",
    ] {
        assert!(names.contains(wanted), "no {wanted} alert in {names:?}");
    }
    assert_eq!(names.len(), rules.len(), "alert names are unique");
    for rule in &rules {
        let metrics = metrics_of(&rule.expr);
        assert!(
            metrics.iter().any(|m| m.starts_with("strongsync_")) || rule.alert == "StrongsyncDown",
            "{}: queries no strongsync metric",
            rule.alert
        );
        if let Some(for_) = &rule.for_ {
            promql_parser::util::parse_duration(for_)
                .unwrap_or_else(|e| panic!("{}: for {for_:?}: {e}", rule.alert));
        }
        let severity = rule.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{}: severity {severity:?}",
            rule.alert
        );
        assert!(
            rule.annotations
                .get("summary")
                .is_some_and(|s| !s.is_empty()),
            "{}: a summary",
            rule.alert
        );
    }
}

/// Prometheus's own checker and the rules' unit tests (deploy/prometheus/*.test.yml): every
/// alert has a test that fires it. `tests/run` puts promtool on the PATH, unpacked from
/// Debian's prometheus package.
#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    let promtool = |args: &[&str]| {
        Command::new("promtool")
            .args(args)
            .current_dir(deploy_path("prometheus"))
            .output()
    };
    let version = promtool(&["--version"]).expect(
        "promtool on the PATH (tests/run unpacks it from Debian's prometheus package into target/tools)",
    );
    assert!(version.status.success());
    // Every alert is fired by a unit test.
    let tests = read("prometheus/strongsync-alerts.test.yml");
    for rule in alert_rules() {
        assert!(
            tests.contains(&format!("alertname: {}\n", rule.alert)),
            "{} has no unit test in strongsync-alerts.test.yml",
            rule.alert
        );
    }
    for args in [
        &["check", "rules", "strongsync-alerts.yml"][..],
        &["check", "config", "prometheus.yml"],
        &["test", "rules", "strongsync-alerts.test.yml"],
    ] {
        let out = promtool(args).unwrap();
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn dashboard_parses_and_every_query_is_valid_promql() {
    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("JSON");
    let panels = dashboard["panels"].as_array().unwrap();
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels {
        assert!(panel["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(panel["gridPos"]["w"].as_u64().is_some());
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}");
        assert!(
            !panel["targets"].as_array().unwrap().is_empty(),
            "{}",
            panel["title"]
        );
    }
    let queried: BTreeSet<String> = dashboard_queries()
        .iter()
        .flat_map(|q| metrics_of(q))
        .collect();
    for family in [
        "strongsync_durability_state",
        "strongsync_commit_wait_seconds_bucket",
        "strongsync_replica_ack_latency_seconds_bucket",
        "strongsync_parked_sessions",
        "strongsync_replica_lag_bytes",
        "strongsync_fenced",
        "strongsync_epoch",
        "strongsync_leader",
        "strongsync_lease_renewals_total",
        "strongsync_state_file_writes_total",
        "strongsync_pool_idle_connections",
        "strongsync_sessions_pinned",
        "strongsync_tls_logins_total",
    ] {
        assert!(queried.contains(family), "the dashboard shows {family}");
    }
}

#[test]
fn prometheus_config_loads_the_rules_and_scrapes_the_admin_port() {
    let config: Value = serde_yaml_ng::from_str(&read("prometheus/prometheus.yml")).expect("YAML");
    let rule_files = config["rule_files"].as_sequence().unwrap();
    for file in rule_files {
        let path = deploy_path("prometheus").join(file.as_str().unwrap());
        assert!(path.is_file(), "{} exists", path.display());
    }
    let job = config["scrape_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|job| job["job_name"] == "strongsync")
        .expect("a strongsync job");
    assert_eq!(job["metrics_path"], "/metrics");
    let targets = job["static_configs"][0]["targets"].as_sequence().unwrap();
    assert!(targets
        .iter()
        .all(|t| t.as_str().unwrap().ends_with(":9104")));
}

/// Every document of a YAML file in `deploy/`.
fn yaml_documents(relative: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(&read(relative))
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
        .collect()
}

/// The documents of `kind`.
fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents
        .iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

#[test]
fn kubernetes_sidecar_config_is_valid_and_probes_use_the_admin_port() {
    let documents = yaml_documents("kubernetes/strongsync-sidecar.yaml");
    let of_kind = |kind: &str| of_kind(&documents, kind);

    // The strongsync config it mounts is one the binary accepts.
    let config_map = of_kind("ConfigMap")[0];
    let toml_text = config_map["data"]["strongsync.toml"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("strongsync.toml");
    std::fs::write(&file, toml_text).unwrap();
    let checked = run_strongsync(&["check-config", file.to_str().unwrap()]);
    assert!(checked.success(), "{checked}");
    let config: toml::Table = checked.stdout.parse().unwrap();
    let admin_port: u64 = config["admin_listen"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let grace = humantime::parse_duration(config["shutdown_grace"].as_str().unwrap()).unwrap();

    let set = of_kind("StatefulSet")[0];
    let pod = &set["spec"]["template"];
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/port"],
        admin_port.to_string().as_str()
    );
    let termination = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    assert!(
        Duration::from_secs(termination) > grace,
        "the kubelet waits longer than strongsync's shutdown grace"
    );
    let containers = pod["spec"]["containers"].as_sequence().unwrap();
    let strongsync = containers
        .iter()
        .find(|c| c["name"] == "strongsync")
        .expect("a strongsync container");
    let admin = strongsync["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "admin")
        .expect("an admin port");
    assert_eq!(admin["containerPort"].as_u64(), Some(admin_port));
    assert_eq!(strongsync["readinessProbe"]["httpGet"]["path"], "/readyz");
    pulls_the_built_image(&documents);
    assert_eq!(strongsync["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(strongsync["livenessProbe"]["httpGet"]["path"], "/healthz");

    // Replicas must reach the pod before it is ready (readiness waits for them).
    let services = of_kind("Service");
    assert!(
        services
            .iter()
            .any(|s| s["spec"]["publishNotReadyAddresses"] == true),
        "a Service for replicas that does not wait for readiness"
    );
}

#[test]
fn systemd_unit_reloads_with_sighup_and_waits_out_the_shutdown_grace() {
    let unit = read("systemd/strongsync.service");
    let setting = |key: &str| -> &str {
        unit.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in the unit"))
    };
    assert!(setting("ExecStart").contains("--config"));
    assert!(setting("ExecReload").contains("-HUP"));
    assert_eq!(setting("KillSignal"), "SIGTERM");
    let stop: u64 = setting("TimeoutStopSec").parse().unwrap();
    assert!(Duration::from_secs(stop) > example_shutdown_grace());
    assert_eq!(
        setting("RestartPreventExitStatus"),
        "64",
        "the binary's exit code for a bad configuration"
    );
}

/// Every key of a printed config file, with its section (`durability.quorum`, `replica.zone`).
fn printed_keys(table: &toml::Table, prefix: &str, keys: &mut BTreeSet<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) if prefix.is_empty() => printed_keys(inner, &path, keys),
            // An array of tables (`[[replica]]`); an array of values is one setting.
            toml::Value::Array(tables) if tables.iter().all(toml::Value::is_table) => {
                for inner in tables.iter().filter_map(toml::Value::as_table) {
                    printed_keys(inner, &path, keys);
                }
            }
            _ => {
                keys.insert(path);
            }
        }
    }
}

#[test]
fn check_config_prints_every_setting_the_definitions_have_but_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("probe-password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let password = password.display().to_string();
    let base = format!(
        "primary = \"db:3306\"\nworker_threads = 1\nprimary_tls_ca = \"/etc/ca.pem\"\n\
         [tls]\ncert = \"/etc/tls.crt\"\nkey = \"/etc/tls.key\"\n\
         [durability]\nprimary_zone = \"a\"\nsession_quorum_floor = 1\n\
         [probe]\nuser = \"probe\"\npassword_file = {password:?}\n\
         [[replica]]\nserver_id = 2\nzone = \"a\"\nlabels = {{ role = \"dr\" }}\n\
         address = \"10.0.0.2:3306\"\n\
         [failover]\nadmin_token_file = \"/run/token\"\n\
         user = \"promoter\"\npassword_file = {password:?}\n"
    );
    // A state file and a cluster exclude each other: one file with each.
    let alone = format!("{base}state_file = \"/var/lib/s.json\"\n");
    let clustered = format!(
        "{base}[cluster]\nendpoints = [\"http://10.0.0.5:2379\"]\nname = \"a\"\n\
         advertise = \"10.0.0.1:3307\"\nca = \"/etc/ca.pem\"\ncert = \"/etc/c.pem\"\n\
         key = \"/etc/k.pem\"\nuser = \"strongsync\"\npassword_file = {password:?}\n"
    );
    let mut keys = BTreeSet::new();
    let mut printed = toml::Table::new();
    for (i, text) in [clustered, alone].iter().enumerate() {
        let file = dir.path().join(format!("strongsync-{i}.toml"));
        std::fs::write(&file, text).unwrap();
        // The files it names are another host's: the settings alone are checked.
        let out = run_strongsync(&["check-config", "--skip-files", file.to_str().unwrap()]);
        assert!(out.success(), "{out}");
        assert!(!out.stdout.contains("s3cret"), "{out}");
        assert!(
            out.stdout
                .contains("# tls.cert = /etc/tls.crt: not opened (--skip-files)"),
            "{out}"
        );
        printed = out.stdout.parse().expect("check-config prints TOML");
        printed_keys(&printed, "", &mut keys);
    }
    let defined: BTreeSet<String> = strongsync::Config::settings()
        .iter()
        .filter(|s| !s.meta.secret)
        .map(|s| s.key.to_owned())
        .collect();
    assert_eq!(keys, defined, "{printed}");
    // And it prints the defaults the definitions give.
    for setting in strongsync::Config::settings() {
        let Some(default) = setting.default.as_deref() else {
            continue;
        };
        let (section, key) = setting.key.split_once('.').unwrap_or(("", setting.key));
        let value = if section.is_empty() {
            printed.get(key)
        } else if section == "replica" {
            continue;
        } else {
            printed[section].get(key)
        };
        let untouched = ![
            "primary",
            "worker_threads",
            "durability.primary_zone",
            "durability.session_quorum_floor",
        ]
        .contains(&setting.key);
        if untouched {
            assert_eq!(
                value.map(ToString::to_string).as_deref(),
                Some(default),
                "{}",
                setting.key
            );
        }
    }
}

/// The cluster's files: the instance's config is one strongsync accepts, and HAProxy accepts
/// its routing, which sends clients and replicas alike to the instance whose /leader passes on
/// the admin port the config gives.
#[test]
fn the_cluster_layout_files_are_valid_and_route_by_leader() {
    let file = deploy_path("cluster/strongsync.toml");
    // Its secrets are the operator's: the settings are checked, and the files named unopened.
    let checked = run_strongsync(&["check-config", "--skip-files", file.to_str().unwrap()]);
    assert!(checked.success(), "{checked}");
    let config: toml::Table = checked.stdout.parse().unwrap();
    assert_one_certificate_for_the_cluster(&config);
    let admin_port = config["admin_listen"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();

    let haproxy = read("cluster/haproxy.cfg");
    let checks: Vec<&str> = haproxy
        .lines()
        .filter(|l| l.trim_start().starts_with("option httpchk"))
        .collect();
    assert_eq!(checks, ["    option httpchk GET /leader"], "{haproxy}");
    assert!(
        haproxy.contains(&format!("check port {admin_port}")),
        "{haproxy}"
    );
    let out = Command::new("haproxy")
        .args(["-c", "-f"])
        .arg(deploy_path("cluster/haproxy.cfg"))
        .output()
        .expect("run haproxy -c (Debian: haproxy)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cluster's instances serve one certificate, configured: without it each would make its own
/// at every start (no state file to keep it by), and a client checking it would be refused
/// after a takeover.
fn assert_one_certificate_for_the_cluster(config: &toml::Table) {
    let tls = config["tls"].as_table().expect("a [tls] section");
    for key in ["cert", "key"] {
        assert!(
            tls.get(key).and_then(|v| v.as_str()).is_some(),
            "tls.{key}: {tls:?}"
        );
    }
}

/// The cluster's systemd drop-in: it orders the instance after a local etcd, and restarts a
/// standby whatever stopped it but a bad configuration (the unit's exit code 64 still holds).
#[test]
fn the_cluster_systemd_drop_in_restarts_a_standby_and_follows_etcd() {
    let drop_in = read("cluster/strongsync-cluster.conf");
    let unit = read("systemd/strongsync.service");
    let setting = |text: &str, key: &str| -> Option<String> {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    assert!(setting(&drop_in, "After").unwrap().contains("etcd.service"));
    assert_eq!(setting(&drop_in, "Restart").as_deref(), Some("always"));
    assert_eq!(setting(&drop_in, "RestartPreventExitStatus"), None);
    assert_eq!(
        setting(&unit, "RestartPreventExitStatus").as_deref(),
        Some("64")
    );
    assert!(drop_in.contains("strongsync.service.d/"), "{drop_in}");
}

/// The image the manifests pull is the one `deploy/Dockerfile` says to build, and its user.
fn image_and_user() -> (String, u64) {
    let user = read("Dockerfile")
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .and_then(|u| u.split(':').next())
        .and_then(|u| u.parse().ok())
        .expect("a numeric USER");
    (image_tag(), user)
}

/// Every pod template's containers run the Dockerfile's image.
fn pulls_the_built_image(documents: &[Value]) {
    let (tag, _) = image_and_user();
    let mut images = 0;
    for doc in documents {
        let spec = if doc["kind"] == "Job" || doc["kind"] == "StatefulSet" {
            &doc["spec"]["template"]["spec"]
        } else {
            continue;
        };
        for c in spec["containers"].as_sequence().unwrap() {
            if c["name"] != "mariadb" {
                assert_eq!(c["image"].as_str(), Some(tag.as_str()), "{:?}", c["name"]);
                images += 1;
            }
        }
    }
    assert!(images > 0);
}

/// The pod template of a Job or StatefulSet.
fn pod_spec(doc: &Value) -> &Value {
    &doc["spec"]["template"]["spec"]
}

/// Where `container` finds each volume of `pod`, by what the volume holds (`configMap NAME`,
/// `secret NAME`).
fn mounts(pod: &Value, container: &Value) -> Vec<(String, String)> {
    container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            let volume = pod["volumes"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|v| v["name"] == m["name"])
                .expect("a mounted volume");
            let source = if let Some(name) = volume["configMap"]["name"].as_str() {
                format!("configMap {name}")
            } else {
                format!(
                    "secret {}",
                    volume["secret"]["secretName"].as_str().unwrap()
                )
            };
            (source, m["mountPath"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The cluster on Kubernetes: its config is one strongsync accepts, with each pod's name and
/// address from the environment; a pod is ready only while it leads; the init Job creates the
/// state from the instances' own ConfigMap; and the image's user can read every secret.
#[test]
fn kubernetes_cluster_routes_to_the_leader_and_its_config_is_valid() {
    let documents = yaml_documents("kubernetes/strongsync-cluster.yaml");
    let init = yaml_documents("kubernetes/strongsync-cluster-init.yaml");
    pulls_the_built_image(&documents);
    pulls_the_built_image(&init);
    let of_kind = |kind: &str| of_kind(&documents, kind);
    let dir = tempfile::tempdir().unwrap();
    let config_map = of_kind("ConfigMap")[0];
    let file = dir.path().join("strongsync.toml");
    std::fs::write(
        &file,
        config_map["data"]["strongsync.toml"].as_str().unwrap(),
    )
    .unwrap();

    let set = of_kind("StatefulSet")[0];
    let container = &pod_spec(set)["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/leader");
    let env: Vec<(&str, &str)> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?, e["value"].as_str()?)))
        .collect();
    // The pod's own values, as the kubelet expands them; the files are the pod's, not here.
    let mut command = support::proxy::strongsync_command(&[
        "check-config",
        "--skip-files",
        file.to_str().unwrap(),
    ]);
    for (k, v) in &env {
        command.env(
            k,
            v.replace("$(POD_NAME)", "strongsync-1")
                .replace("$(POD_IP)", "10.1.2.3"),
        );
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: toml::Table = stdout.parse().unwrap();
    assert_one_certificate_for_the_cluster(&config);
    assert_eq!(config["cluster"]["name"].as_str(), Some("strongsync-1"));
    assert_eq!(
        config["cluster"]["advertise"].as_str(),
        Some("10.1.2.3:3307")
    );
    // Every file the config names is in a volume the pod mounts.
    let files: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("# ")?.split_once(" = ")?.1.split(':').next())
        .collect();
    assert!(files.len() >= 5, "{stdout}");
    let set_mounts = mounts(pod_spec(set), container);
    for file in &files {
        assert!(
            set_mounts
                .iter()
                .any(|(_, m)| file.starts_with(&format!("{m}/"))),
            "{file} is in none of {set_mounts:?}"
        );
    }

    // The init Job reads the same ConfigMap at the same place, with the secrets it names, and
    // creates the state the instances read: under the ConfigMap's cluster.prefix.
    let job = of_kind_in(&init, "Job");
    let job_container = &pod_spec(job)["containers"][0];
    let job_mounts = mounts(pod_spec(job), job_container);
    let config_mount = set_mounts
        .iter()
        .find(|(source, _)| source.starts_with("configMap"))
        .unwrap();
    assert_eq!(
        config_mount.0,
        format!(
            "configMap {}",
            config_map["metadata"]["name"].as_str().unwrap()
        )
    );
    let config_file = format!("{}/strongsync.toml", config_mount.1);
    assert_eq!(
        container_args(container),
        ["--config", config_file.as_str()]
    );
    assert_eq!(
        container_args(job_container),
        ["init-state", "--config", config_file.as_str()]
    );
    assert!(job_mounts.contains(config_mount), "{job_mounts:?}");
    for (key, file) in [
        ("probe.password_file", &config["probe"]["password_file"]),
        (
            "failover.password_file",
            &config["failover"]["password_file"],
        ),
    ] {
        let file = file.as_str().unwrap();
        assert!(
            job_mounts
                .iter()
                .any(|(_, m)| file.starts_with(&format!("{m}/"))),
            "init-state reads {key} = {file}: in none of {job_mounts:?}"
        );
    }

    // The image's user, and a group the secrets are readable by and others' are not.
    let (_, user) = image_and_user();
    for pod in [pod_spec(set), pod_spec(job)] {
        let security = &pod["securityContext"];
        assert_eq!(security["runAsUser"].as_u64(), Some(user));
        assert_eq!(security["fsGroup"].as_u64(), Some(user));
        let secrets: Vec<&Value> = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|v| v["secret"].is_mapping())
            .collect();
        assert!(!secrets.is_empty());
        for volume in secrets {
            let mode = kubernetes_mode(&volume["secret"]["defaultMode"])
                .unwrap_or_else(|| panic!("a defaultMode: {volume:?}"));
            assert_eq!(mode & 0o007, 0, "others read no secret: {mode:o}");
            assert_eq!(mode & 0o040, 0o040, "the group reads it: {mode:o}");
            assert_eq!(mode & 0o020, 0, "the group writes none: {mode:o}");
        }
    }

    let labels = &set["spec"]["template"]["metadata"]["labels"];
    let db = of_kind("Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "db")
        .expect("the db Service");
    for (key, value) in db["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(
            &labels[key.as_str().unwrap()],
            value,
            "the db Service selects the instances"
        );
    }
}

/// The one document of `kind`.
fn of_kind_in<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(documents, kind);
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}
