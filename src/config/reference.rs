//! The reference table of every setting, as `docs/configuration.md` shows it: made from the
//! settings' own definitions, so that a test can hold the page to them.

use super::define::SettingInfo;
use super::Config;

/// The Markdown table of every setting: its key in the file, its flag and environment
/// variable, its default and what it means ("(live)": a reload applies it).
pub fn reference_table() -> String {
    let mut table = String::from(
        "| key in the file | flag / environment | default | meaning |\n|---|---|---|---|\n",
    );
    for setting in Config::settings() {
        table.push_str(&row(&setting));
    }
    table
}

/// What a reload (SIGHUP) applies and what it leaves for a restart, key by key, as
/// docs/configuration.md lists them.
pub fn reload_lists() -> String {
    let settings = Config::settings();
    let keys = |live: bool| {
        settings
            .iter()
            .filter(|s| s.meta.live == live)
            .map(|s| format!("`{}`", s.key))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "- **A reload applies:** {}.\n- **A restart applies** (a reload logs each one changed, by key): {}.\n",
        keys(true),
        keys(false)
    )
}

fn row(setting: &SettingInfo) -> String {
    let mut flag = match (setting.flag(), setting.env()) {
        (Some(flag), Some(env)) => format!("`--{flag}`, `{env}`"),
        _ => "file only".to_owned(),
    };
    if let Some(former) = setting.meta.former_flag {
        flag.push_str(&format!(" (formerly `--{former}`)"));
    }
    let default = match (setting.meta.required, setting.meta.default_text) {
        (true, _) => "(required)".to_owned(),
        (false, Some(text)) => text.to_owned(),
        (false, None) => setting
            .default_words()
            .map_or_else(|| "none".to_owned(), |value| format!("`{value}`")),
    };
    let live = if setting.meta.live { " (live)" } else { "" };
    format!(
        "| `{}` | {flag} | {default} | {}{live} |\n",
        setting.key,
        setting.doc.replace('|', "\\|")
    )
}
