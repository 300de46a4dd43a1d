//! What a start would refuse, checked before it binds a port or writes a file, and by
//! `strongsync check-config`: every file a setting names, opened and read as a start reads it.

use std::path::{Path, PathBuf};

use super::StartError;
use crate::config::{generated_files, Config, ConfigError, TlsConfig};
use crate::failover::{AdminToken, State, StateError};
use crate::tls::{ClientTls, PrimaryTlsConnector};

/// Every file the settings name, with its key: what `check-config` opens (or says it did not).
pub fn files_named(config: &Config) -> Vec<(&'static str, PathBuf)> {
    let tls = (!config.tls.disabled)
        .then_some([("tls.cert", &config.tls.cert), ("tls.key", &config.tls.key)])
        .into_iter()
        .flatten();
    let c = &config.cluster;
    // The cluster's TLS files are read only when there is a cluster to reach (its password
    // file, like every password file, when the configuration is loaded).
    let cluster = c
        .enabled()
        .then_some([
            ("cluster.ca", &c.ca),
            ("cluster.cert", &c.cert),
            ("cluster.key", &c.key),
        ])
        .into_iter()
        .flatten();
    tls.chain([
        ("primary_tls_ca", &config.primary_tls_ca),
        ("probe.password_file", &config.probe.password_file),
        (
            "failover.admin_token_file",
            &config.failover.admin_token_file,
        ),
        ("failover.state_file", &config.failover.state_file),
        ("failover.password_file", &config.failover.password_file),
        ("cluster.password_file", &c.password_file),
    ])
    .chain(cluster)
    .filter_map(|(key, path)| Some((key, path.clone()?)))
    .collect()
}

/// Opens every file a setting names, as a start would, and checks that an instance of a cluster
/// says who it is. The password files were read when the configuration was loaded.
///
/// # Errors
/// [`StartError`]: the first file a start would refuse, and why.
pub fn check_files(config: &Config) -> Result<(), StartError> {
    check_before_start(config)?;
    crate::tls::install_default_provider();
    if let Some(state) = &config.failover.state_file {
        // The certificate strongsync makes next to its state file, if it has made it.
        let (cert, key) = generated_files(state);
        if config.tls.cert.is_none() && !config.tls.disabled && (cert.exists() || key.exists()) {
            ClientTls::new(&TlsConfig::with_files(cert, key), None)?;
        }
    }
    if config.tls.files()?.is_some() {
        ClientTls::new(&config.tls, None)?;
    }
    PrimaryTlsConnector::new(config.primary_tls, config.primary_tls_ca.as_deref())?;
    if config.cluster.enabled() {
        crate::cluster::connect_options(config)?;
    }
    Ok(())
}

/// What a start checks before anything else: the admin token, the state file (there, readable,
/// its directory writable) and an instance of a cluster named, so that a start refused for
/// them has neither bound a port nor written a file.
///
/// # Errors
/// [`StartError`] naming the setting or the file.
pub fn check_before_start(config: &Config) -> Result<(), StartError> {
    if let Some(token) = &config.failover.admin_token_file {
        AdminToken::read(token).map_err(crate::failover::ControlStartError::from)?;
    }
    if let Some(state) = config
        .failover
        .state_file
        .as_deref()
        .filter(|_| !config.cluster.enabled())
    {
        State::load(state).map_err(crate::failover::ControlStartError::from)?;
        writable(state).map_err(crate::failover::ControlStartError::from)?;
    }
    if config.cluster.enabled() {
        for (key, given) in [
            ("cluster.name", config.cluster.name.is_some()),
            ("cluster.advertise", config.cluster.advertise.is_some()),
        ] {
            if !given {
                return Err(ConfigError::Invalid {
                    key,
                    problem: "an instance of a cluster needs its own cluster.name (unique among the instances) and cluster.advertise (the HOST:PORT clients and replicas reach its SQL port by, named to those that reach another instance)".into(),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The state file can be written as strongsync writes it: in place, and by a file made beside
/// it and renamed over it (so its directory must take a new file).
fn writable(state: &Path) -> Result<(), StateError> {
    let io = |path: &Path, source| StateError::Io {
        path: path.to_owned(),
        source,
    };
    std::fs::OpenOptions::new()
        .append(true)
        .open(state)
        .map_err(|e| io(state, e))?;
    let dir = state.parent().unwrap_or(Path::new("."));
    let probe = dir.join(format!(".strongsync-writable-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| io(dir, e))?;
    std::fs::remove_file(&probe).map_err(|e| io(&probe, e))
}
