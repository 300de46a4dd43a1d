//! The configuration in effect: the defaults, then the config file, then flags and
//! `STRONGSYNC_*` environment variables (which `main.rs` reads and hands over as key and text),
//! checked as a whole. Every error names the setting at fault.

use std::path::Path;

use super::define::{Layer, Section};
use super::{Config, ConfigError, Files};

/// The probe's password may be given inline or in a file: one given on the command line
/// replaces both of the file's.
const PASSWORD_KEYS: [&str; 2] = ["password", "password_file"];

/// Settings given on the command line or in the environment: each one's key and text.
pub type Flags = Vec<(&'static str, String)>;

/// The configuration `file` (if any) and `flags` describe, on top of the defaults, validated.
/// `beneath` are settings from elsewhere (`RUST_LOG`'s filter) that apply where neither the
/// file nor the flags say anything.
///
/// # Errors
/// [`ConfigError::File`] or [`ConfigError::Syntax`] for a file that cannot be read or is not
/// TOML; [`ConfigError::Unknown`] for a key no setting has; [`ConfigError::Value`],
/// [`ConfigError::Invalid`] or [`ConfigError::Missing`] naming the first setting that is wrong.
pub fn load(file: Option<&Path>, flags: &Flags, beneath: &Flags) -> Result<Config, ConfigError> {
    resolve(read(file)?, flags, beneath, Files::Open)
}

/// As [`load`], without opening the password files the settings name (`check-config
/// --skip-files`, and the operator's commands).
///
/// # Errors
/// As [`load`], but for the password files.
pub fn load_without_files(file: Option<&Path>, flags: &Flags) -> Result<Config, ConfigError> {
    resolve(read(file)?, flags, &Flags::new(), Files::Skip)
}

/// The table of the config `file`, if any.
fn read(file: Option<&Path>) -> Result<toml::Table, ConfigError> {
    Ok(match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                path: path.to_owned(),
                problem: e.to_string(),
            })?;
            parse_toml(&text).map_err(|problem| ConfigError::Syntax {
                path: path.to_owned(),
                problem,
            })?
        }
        None => toml::Table::new(),
    })
}

/// The configuration a file's text and `flags` describe (see [`load`]).
///
/// # Errors
/// As [`load`].
pub fn from_toml(text: &str, flags: &Flags) -> Result<Config, ConfigError> {
    let table = parse_toml(text).map_err(|problem| ConfigError::Syntax {
        path: "<config>".into(),
        problem,
    })?;
    resolve(table, flags, &Flags::new(), Files::Open)
}

fn parse_toml(text: &str) -> Result<toml::Table, toml::de::Error> {
    text.parse::<toml::Table>()
}

fn resolve(
    table: toml::Table,
    flags: &Flags,
    beneath: &Flags,
    files: Files,
) -> Result<Config, ConfigError> {
    let mut layer = Layer::from_file(table);
    for (key, text) in beneath {
        layer.set_unless_given(key, text.clone());
    }
    let gives_password = flags.iter().any(|(key, _)| {
        key.strip_prefix("probe.")
            .is_some_and(|name| PASSWORD_KEYS.contains(&name))
    });
    if gives_password {
        for name in PASSWORD_KEYS {
            layer.unset(&format!("probe.{name}"));
        }
    }
    for (key, text) in flags {
        layer.set_flag(key, text.clone());
    }
    let mut config = Config::default();
    config.take_all(layer)?;
    config.probe.read_password_file(files)?;
    config.failover.read_password_file(files)?;
    config.cluster.read_password_file(files)?;
    config.validate()?;
    Ok(config)
}
