//! What `deploy/` ships, run as shipped, as far as this machine allows: the image built from
//! `deploy/Dockerfile` by podman serves; the systemd unit, installed by the commands its header
//! gives, keeps its state and reads its token under real systemd (a Debian root booted with
//! systemd-nspawn); the Kubernetes cluster's init Job creates the state its instances lead from,
//! each as the image's user reading Secrets as the kubelet mounts them.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde_yaml_ng::Value;
use support::admin;
use support::certs::TestCerts;
use support::cli::mariadb;
use support::debian;
use support::deploy::{container_args, deploy_path, image_tag, kubernetes_mode, read};
use support::etcd::Etcd;
use support::mariadb::{wait_for, MariaDb, MariaDbOptions, APP_PASSWORD, APP_USER};
use support::nspawn::Booted;
use support::podman::Podman;
use support::ports::free_port;
use support::proxy::{strongsync_bin, strongsync_command_of};

const PATIENCE: Duration = Duration::from_secs(120);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Waits until something listens on `admin`.
fn answering(admin: SocketAddr) {
    wait_for(&format!("the admin port {admin}"), PATIENCE, || {
        TcpStream::connect(admin).is_ok()
    });
}

/// `SELECT CURRENT_USER()` through `port` with the `mariadb` CLI.
fn current_user(port: u16) -> String {
    let out = mariadb(port, APP_USER, APP_PASSWORD)
        .args(["--batch", "--skip-column-names"])
        .execute("SELECT CURRENT_USER()");
    assert!(out.success(), "{out}");
    out.stdout.trim().to_owned()
}

#[test]
fn the_image_builds_from_the_dockerfile_and_serves() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let podman = Podman::prepared();
    podman.bases();
    let tag = image_tag();
    let log = tempfile::NamedTempFile::new().unwrap();
    let built = podman.build(
        support::repo(),
        &deploy_path("Dockerfile"),
        &tag,
        log.path(),
    );
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    let tail: Vec<&str> = output.lines().rev().take(40).collect();
    assert!(
        built,
        "podman build -f deploy/Dockerfile:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    let version = podman.must(&["run", "--rm", &tag, "--version"]);
    assert!(version.starts_with("strongsync 0.1.0"), "{version}");
    // The config it ships checks, as the image's own user.
    let user = podman.must(&["run", "--rm", "--entrypoint", "id", &tag, "-u"]);
    assert_eq!(user.trim(), "65532");
    podman.must(&[
        "run",
        "--rm",
        &tag,
        "check-config",
        "/etc/strongsync/strongsync.toml",
    ]);
    // It serves: its default command with the primary and ports given, on the host's network.
    let (listen, admin) = (loopback(), loopback());
    let name = format!("strongsync-test-{}", std::process::id());
    podman.must(&[
        "run",
        "-d",
        "--rm",
        "--name",
        &name,
        "--network",
        "host",
        &tag,
        "--config",
        "/etc/strongsync/strongsync.toml",
        "--primary",
        &primary.addr(),
        "--listen",
        &listen.to_string(),
        "--admin-listen",
        &admin.to_string(),
    ]);
    answering(admin);
    assert_eq!(admin::get(admin, "/healthz").status, 200);
    assert_eq!(current_user(listen.port()), "app@%");
    podman.must(&["stop", "--time", "20", &name]);
}

/// The unit file's header: the commands it says to run (`#   cmd`, joined across `\`), in the
/// order given.
fn unit_commands(unit: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in unit.lines().take_while(|l| l.starts_with('#')) {
        let Some(command) = line.strip_prefix("#   ") else {
            continue;
        };
        let command = command.trim();
        match command.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(command);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

#[test]
fn the_systemd_unit_keeps_its_state_and_reads_its_token_under_systemd() {
    let primary = MariaDb::start(MariaDbOptions::default());
    let base = debian::root(
        "bookworm-systemd",
        &[
            "systemd",
            "systemd-sysv",
            "dbus",
            "libnss-systemd",
            "procps",
            "openssl",
        ],
    );
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = dir.path().join("root");
    debian::copy(&base, &root);

    // The repository as the unit's commands expect it, in the root: the binary, the example
    // config with failing over turned on (its two lines uncommented, as the unit's header
    // says) and this machine's ports, and the unit as shipped.
    let (listen, admin) = (loopback(), loopback());
    let src = root.join("tmp/src");
    std::fs::create_dir_all(src.join("target/release")).unwrap();
    std::fs::create_dir_all(src.join("deploy/systemd")).unwrap();
    std::fs::copy(strongsync_bin(), src.join("target/release/strongsync")).unwrap();
    let example = read("strongsync.toml");
    let mut config = String::new();
    for line in example.lines() {
        let line = match line {
            "# [failover]" => "[failover]".to_owned(),
            l if l.starts_with("# admin_token_file = ") || l.starts_with("# state_file = ") => {
                l.trim_start_matches("# ").to_owned()
            }
            l if l.starts_with("listen = ") => format!("listen = \"{listen}\""),
            l if l.starts_with("admin_listen = ") => format!("admin_listen = \"{admin}\""),
            l if l.starts_with("primary = ") => format!("primary = \"{}\"", primary.addr()),
            l => l.to_owned(),
        };
        config.push_str(&line);
        config.push('\n');
    }
    for key in [
        "[failover]",
        "admin_token_file = ",
        "state_file = ",
        "listen = \"127",
    ] {
        assert!(config.contains(key), "the example has {key}:\n{config}");
    }
    std::fs::write(src.join("deploy/strongsync.toml"), &config).unwrap();
    let unit = read("systemd/strongsync.service");
    std::fs::write(src.join("deploy/systemd/strongsync.service"), &unit).unwrap();

    // Installed by the commands the unit's header gives, run in the root (systemctl's
    // daemon-reload and --now need a running systemd: the boot does them).
    let commands = unit_commands(&unit);
    assert!(commands.len() >= 7, "{commands:?}");
    for command in &commands {
        let command = command.replace(
            "systemctl daemon-reload && systemctl enable --now strongsync",
            "systemctl enable strongsync",
        );
        debian::chroot(&root, &format!("cd /tmp/src && {command}"));
    }
    let token_file = root.join("etc/strongsync/admin-token");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let state_file = root.join("var/lib/strongsync/state.json");
    assert!(state_file.is_file(), "init-state made the state file");

    let booted = Booted::boot(&root, &format!("strongsync-{}", std::process::id()));
    active(&booted, admin);
    let status = admin::status(admin);
    assert!(status.persisted, "{status:#?}");
    assert_eq!(current_user(listen.port()), "app@%");
    // The certificate it made for clients, next to the state, in the service's own directory.
    assert!(root
        .join("var/lib/strongsync/strongsync-cert.pem")
        .is_file());

    // A fence is written to the state file before the call returns: under ProtectSystem=strict,
    // only StateDirectory= makes that possible. The token is the one the header made.
    let fenced = admin::post(admin, "/fence", Some(token.trim()), r#"{"reason": "test"}"#);
    assert_eq!(
        fenced.status,
        200,
        "{}\n{}",
        fenced.body,
        booted.journal("strongsync")
    );
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert!(kept["fenced_epoch"].is_u64(), "{kept}");

    // A reload is a SIGHUP; a restart starts from the state kept.
    booted.must(&["systemctl", "reload", "strongsync"]);
    wait_for("the reload to be logged", PATIENCE, || {
        booted
            .journal("strongsync")
            .contains("SIGHUP: config reloaded")
    });
    booted.must(&["systemctl", "restart", "strongsync"]);
    active(&booted, admin);
    assert!(admin::status(admin).fenced);
    let user = booted.must(&["systemctl", "show", "-p", "User", "--value", "strongsync"]);
    assert_eq!(user.trim(), "strongsync");
    drop(booted);
    debian::remove(&root);
}

/// Waits until the unit `strongsync` is active and its admin port answers; says what its
/// journal says if it does not come.
fn active(booted: &Booted, admin: SocketAddr) {
    let up = (0..PATIENCE.as_millis() / 100).any(|_| {
        let up = booted
            .run(&["systemctl", "is-active", "--quiet", "strongsync"])
            .status
            .success()
            && TcpStream::connect(admin).is_ok();
        if !up {
            std::thread::sleep(Duration::from_millis(100));
        }
        up
    });
    assert!(
        up,
        "strongsync.service did not come up:\n{}",
        booted.journal("strongsync")
    );
}

/// The kubelet's view of a pod's volumes: each mount path of `container` backed by a directory
/// here.
struct Volumes {
    dir: tempfile::TempDir,
    mounts: Vec<(String, std::path::PathBuf)>,
}

impl Volumes {
    fn of(container: &Value) -> Volumes {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mounts = container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let here = dir.path().join(format!("volume-{i}"));
                std::fs::create_dir(&here).unwrap();
                std::fs::set_permissions(&here, std::fs::Permissions::from_mode(0o755)).unwrap();
                (m["mountPath"].as_str().unwrap().to_owned(), here)
            })
            .collect();
        Volumes { dir, mounts }
    }

    /// `path` in the pod, here.
    fn here(&self, path: &str) -> String {
        let (mount, here) = self
            .mounts
            .iter()
            .find(|(m, _)| path.starts_with(&format!("{m}/")))
            .unwrap_or_else(|| panic!("{path} is in no volume the pod mounts"));
        format!("{}{}", here.display(), &path[mount.len()..])
    }

    /// Writes a Secret's file as the kubelet does under the pod's fsGroup: root's, its group
    /// the pod's, the Secret's mode.
    fn secret(&self, path: &str, text: &str, group: u32, mode: u32) {
        let file = self.here(path);
        std::fs::write(&file, text).unwrap();
        std::os::unix::fs::chown(&file, Some(0), Some(group)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Every mount path in `text` replaced by where it is here.
    fn rewrite(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (mount, here) in &self.mounts {
            text = text.replace(&format!("{mount}/"), &format!("{}/", here.display()));
        }
        text
    }
}

#[test]
fn the_kubernetes_init_job_creates_the_state_its_instances_lead_from() {
    let documents: Vec<Value> = [
        "kubernetes/strongsync-cluster.yaml",
        "kubernetes/strongsync-cluster-init.yaml",
    ]
    .iter()
    .flat_map(|f| {
        serde_yaml_ng::Deserializer::from_str(&read(f))
            .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
            .collect::<Vec<Value>>()
    })
    .collect();
    let kind = |k: &str| documents.iter().find(|d| d["kind"] == k).unwrap();
    let (config_map, set, job) = (kind("ConfigMap"), kind("StatefulSet"), kind("Job"));
    let pod = |d: &Value| d["spec"]["template"]["spec"].clone();
    let (set_pod, job_pod) = (pod(set), pod(job));
    let user = set_pod["securityContext"]["runAsUser"].as_u64().unwrap() as u32;
    let group = set_pod["securityContext"]["fsGroup"].as_u64().unwrap() as u32;
    assert_eq!(
        set_pod["securityContext"]["runAsGroup"].as_u64(),
        Some(u64::from(group))
    );
    let secret_mode = |p: &Value, name: &str| {
        p["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| kubernetes_mode(&v["secret"]["defaultMode"]))
            .unwrap()
    };

    let primary = MariaDb::start(MariaDbOptions::default());
    let etcd = Etcd::start(1);
    let set_container = &set_pod["containers"][0];
    let volumes = Volumes::of(set_container);
    // The ConfigMap's config, this machine's servers and ports in it.
    let listen = loopback();
    let admin = loopback();
    let mut config: toml::Table = config_map["data"]["strongsync.toml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let prefix = config["cluster"]["prefix"].as_str().unwrap().to_owned();
    config.insert("listen".into(), listen.to_string().into());
    config.insert("admin_listen".into(), admin.to_string().into());
    config.insert("primary".into(), primary.addr().into());
    config["cluster"]["endpoints"] = vec![etcd.endpoints()[0].clone()].into();
    for replica in config["replica"].as_array_mut().unwrap() {
        replica["address"] = primary.addr().into();
    }
    let config_text = toml::to_string(&config).unwrap();
    let config_path = set_container["args"][1].as_str().unwrap();
    std::fs::write(volumes.here(config_path), volumes.rewrite(&config_text)).unwrap();
    // The Secrets, as the kubelet mounts them under the pod's fsGroup.
    let certs = TestCerts::generate(&["localhost"]);
    let password = "probe-and-failover-secret";
    for (key, text) in [
        ("probe", password.to_owned()),
        ("failover", password.to_owned()),
    ] {
        let path = config[key]["password_file"].as_str().unwrap();
        volumes.secret(
            path,
            &format!("{text}\n"),
            group,
            secret_mode(&set_pod, "secrets"),
        );
    }
    let token = "an-admin-token-of-the-cluster-0123";
    let token_path = config["failover"]["admin_token_file"].as_str().unwrap();
    volumes.secret(token_path, token, group, secret_mode(&set_pod, "secrets"));
    for (key, from) in [("cert", &certs.cert), ("key", &certs.key)] {
        let path = config["tls"][key].as_str().unwrap();
        let text = std::fs::read_to_string(from).unwrap();
        volumes.secret(path, &text, group, secret_mode(&set_pod, "tls"));
    }
    for account in [
        config["probe"]["user"].as_str().unwrap(),
        config["failover"]["user"].as_str().unwrap(),
    ] {
        primary.sql(&format!(
            "CREATE USER '{account}'@'%' IDENTIFIED BY '{password}'; \
             GRANT ALL ON *.* TO '{account}'@'%'"
        ));
    }

    // The Job's command, as the image's user, with the Job's own mounts (the same ConfigMap).
    // The binary is copied where that user may run it: the checkout may be root's alone.
    let bin = volumes.dir.path().join("strongsync");
    std::fs::copy(strongsync_bin(), &bin).unwrap();
    let as_pod = |args: Vec<String>, env: &[(String, String)]| {
        let args: Vec<String> = args.iter().map(|a| volumes.rewrite(a)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut command = strongsync_command_of(&bin, &args);
        // Its primary group is the fsGroup the Secrets are readable by.
        command.uid(user).gid(group);
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    };
    let job_container = &job_pod["containers"][0];
    let init = as_pod(container_args(job_container), &[]).output().unwrap();
    assert!(
        init.status.success(),
        "the init Job:\n{}{}",
        String::from_utf8_lossy(&init.stdout),
        String::from_utf8_lossy(&init.stderr)
    );
    let state = etcd.get(&format!("{prefix}/state"));
    assert!(
        state.is_some(),
        "the state under the ConfigMap's prefix {prefix}"
    );

    // An instance, as its pod runs it: its args, its environment as the kubelet expands it.
    let env: Vec<(String, String)> = set_container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let value = e["value"]
                .as_str()?
                .replace("$(POD_NAME)", "strongsync-0")
                .replace("$(POD_IP):3307", &listen.to_string());
            Some((e["name"].as_str()?.to_owned(), value))
        })
        .collect();
    let log = volumes.dir.path().join("instance.log");
    let mut instance = as_pod(container_args(set_container), &env)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let probe = set_container["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let passed = (0..PATIENCE.as_millis() / 100).any(|_| {
        let passed = TcpStream::connect(admin).is_ok() && admin::get(admin, &probe).status == 200;
        if !passed {
            std::thread::sleep(Duration::from_millis(100));
        }
        passed
    });
    assert!(
        passed,
        "{probe} never passed:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(current_user(listen.port()), "app@%");
    let status = admin::status(admin);
    let name = status.cluster.as_ref().map(|c| c.name.as_str());
    assert_eq!(name, Some("strongsync-0"), "{status:#?}");
    let _ = instance.kill();
    let _ = instance.wait();
}
