//! Each setting defined once: [`settings!`] declares a section of the configuration, and
//! everything else about its settings comes from that one declaration.

use std::collections::BTreeMap;

use super::{ConfigError, ValueError};

/// How a setting shows outside the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// It is also a command-line flag and an environment variable, both named after its key
    /// (`durability.quorum`: `--durability-quorum`, `STRONGSYNC_DURABILITY_QUORUM`); `false`:
    /// the config file only.
    pub flag: bool,
    /// The flag's name before flags were named after their keys: still taken, with a warning,
    /// as a flag and as its environment variable, for one release.
    pub former_flag: Option<&'static str>,
    /// What the flag's value looks like in `--help`, if not the type's own word.
    pub value_name: Option<&'static str>,
    /// A reload (SIGHUP) applies it without a restart.
    pub live: bool,
    /// Never printed, logged or shown (its environment variable's value is hidden in `--help`).
    pub secret: bool,
    /// What an integer may be.
    pub bound: Option<Bound>,
    /// A duration must be more than zero.
    pub nonzero: bool,
    /// The default in words, where the value's own would mislead (one computed at start).
    pub default_text: Option<&'static str>,
    /// Added to what is wrong with a value that is out of bounds.
    pub hint: Option<&'static str>,
    /// There is no default: it must be given.
    pub required: bool,
}

/// What an integer setting may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// From the first to the second, both included.
    Between(u64, u64),
    /// This or more.
    AtLeast(u64),
    /// This or less.
    AtMost(u64),
}

/// One setting, as `--help` and the reference table describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingInfo {
    /// Its key in the config file (`durability.quorum`).
    pub key: &'static str,
    /// What it means: the doc comment of its field.
    pub doc: String,
    pub meta: Meta,
    /// What the flag's value looks like.
    pub value_name: &'static str,
    /// Its default as the file writes it, if it has one.
    pub default: Option<String>,
}

/// Settings given from outside, layered: what the file says, then flags and the environment,
/// which win.
#[derive(Debug, Default)]
pub struct Layer {
    items: BTreeMap<String, Item>,
}

/// One entry of a [`Layer`].
#[derive(Debug)]
pub enum Item {
    /// A value from the file.
    File(toml::Value),
    /// A value from a flag or an environment variable, as text.
    Flag(String),
    /// A table of the file (a section), with whatever flags set in it.
    Table(Layer),
}

/// A value of a setting: how the file and a flag say it.
pub trait Value: Sized + Clone + PartialEq {
    /// What the value looks like in `--help`.
    const VALUE_NAME: &'static str;

    /// The value as the file says it.
    ///
    /// # Errors
    /// What is wrong with it.
    fn from_file(value: toml::Value) -> Result<Self, ValueError>;

    /// The value as a flag or an environment variable says it.
    ///
    /// # Errors
    /// What is wrong with it.
    fn from_flag(text: &str) -> Result<Self, ValueError>;

    /// The value as the file writes it; `None`: left out (nothing set, or a secret).
    fn to_file(&self) -> Option<toml::Value>;

    /// Checks the value against the setting's bounds.
    ///
    /// # Errors
    /// What is wrong with it.
    fn check(&self, _meta: &Meta) -> Result<(), ValueError> {
        Ok(())
    }
}

/// A field of a section: a [`Value`], or a section of its own.
pub trait Field: Sized {
    /// Adds what `--help` and the docs say of it (a section: of each of its settings).
    fn describe(
        &self,
        key: &'static str,
        doc: &'static str,
        meta: Meta,
        out: &mut Vec<SettingInfo>,
    );

    /// Takes in what the layer says of it.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the key (a section: [`ConfigError::Invalid`] too), or
    /// [`ConfigError::Unknown`] for a key inside it that no setting has.
    fn take(&mut self, key: &'static str, item: Item, meta: &Meta) -> Result<(), ConfigError>;

    /// Checks it against its bounds (a section: each of its settings).
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the key.
    fn check(&self, key: &'static str, meta: &Meta) -> Result<(), ConfigError>;

    /// How the file writes it.
    fn write(&self, meta: &Meta) -> Option<toml::Value>;

    /// Adds `key` (a section: the keys of its settings) to `out` if `new` differs and a
    /// reload cannot apply it.
    fn restarts(&self, new: &Self, key: &'static str, meta: &Meta, out: &mut Vec<&'static str>);

    /// Takes `new`'s value where a reload applies it (a section: its live settings).
    fn take_live(&mut self, new: &Self, meta: &Meta);
}

/// A section of the configuration, as [`settings!`] declares it.
pub trait Section: Default {
    /// Adds what `--help` and the docs say of each of its settings.
    fn describe_all(&self, out: &mut Vec<SettingInfo>);

    /// Takes in what the layer says of its settings.
    ///
    /// # Errors
    /// See [`Field::take`].
    fn take_all(&mut self, layer: Layer) -> Result<(), ConfigError>;

    /// Checks each of its settings against its bounds.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the first setting out of bounds.
    fn check_all(&self) -> Result<(), ConfigError>;

    /// Every setting, as the file writes it.
    fn write_all(&self) -> toml::Table;

    /// The keys of the settings that differ in `new` and that a reload cannot apply.
    fn restarts_all(&self, new: &Self, out: &mut Vec<&'static str>);

    /// Whether a reload applies any of its settings (if none, a change in it is named by the
    /// section's key).
    fn any_live() -> bool;

    /// Takes `new`'s value of every setting a reload applies.
    fn take_live_all(&mut self, new: &Self);
}

/// Declares a section of the configuration. Each field is `#[setting(META)] name: Type =
/// default,` under its doc comment; `in "prefix"` names the section's table in the file. From
/// that one declaration come the struct and its defaults, reading it from the config file and
/// from flags and `STRONGSYNC_*` environment variables (errors name the key), the bounds checks,
/// what `check-config` prints, the flags' `--help`, and the reference table in
/// `docs/configuration.md` (a test holds the page to it). A field's type says how it is read and
/// written ([`Value`]); a section is a field too ([`Field`]), read from a table of the file.
macro_rules! settings {
    (
        $(#[$attr:meta])*
        pub struct $name:ident in $prefix:literal { $($fields:tt)* }
    ) => {
        $crate::config::define::settings!(@section [$prefix] $(#[$attr])* $name { $($fields)* });
    };
    (
        $(#[$attr:meta])*
        pub struct $name:ident { $($fields:tt)* }
    ) => {
        $crate::config::define::settings!(@section [""] $(#[$attr])* $name { $($fields)* });
    };
    (
        @section [$prefix:literal]
        $(#[$attr:meta])*
        $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[setting($meta:expr)]
                pub $field:ident: $ty:ty = $default:expr,
            )*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl $crate::config::define::Section for $name {
            fn describe_all(&self, out: &mut Vec<$crate::config::define::SettingInfo>) {
                $(
                    $crate::config::define::Field::describe(
                        &self.$field,
                        $crate::config::define::key!($prefix, $field),
                        concat!($($doc, "\n"),*),
                        $meta,
                        out,
                    );
                )*
            }

            fn take_all(
                &mut self,
                mut layer: $crate::config::define::Layer,
            ) -> Result<(), $crate::config::ConfigError> {
                $(
                    if let Some(item) = layer.take(stringify!($field)) {
                        $crate::config::define::Field::take(
                            &mut self.$field,
                            $crate::config::define::key!($prefix, $field),
                            item,
                            &$meta,
                        )?;
                    }
                )*
                layer.refuse_the_rest($prefix)
            }

            fn check_all(&self) -> Result<(), $crate::config::ConfigError> {
                $(
                    $crate::config::define::Field::check(
                        &self.$field,
                        $crate::config::define::key!($prefix, $field),
                        &$meta,
                    )?;
                )*
                Ok(())
            }

            fn write_all(&self) -> toml::Table {
                let mut table = toml::Table::new();
                $(
                    if let Some(value) = $crate::config::define::Field::write(&self.$field, &$meta) {
                        table.insert(stringify!($field).into(), value);
                    }
                )*
                table
            }

            fn restarts_all(&self, new: &Self, out: &mut Vec<&'static str>) {
                $(
                    $crate::config::define::Field::restarts(
                        &self.$field,
                        &new.$field,
                        $crate::config::define::key!($prefix, $field),
                        &$meta,
                        out,
                    );
                )*
            }

            fn any_live() -> bool {
                false $(|| $meta.live)*
            }

            fn take_live_all(&mut self, new: &Self) {
                $( $crate::config::define::Field::take_live(&mut self.$field, &new.$field, &$meta); )*
            }
        }

        impl $crate::config::define::Field for $name {
            fn describe(
                &self,
                _key: &'static str,
                _doc: &'static str,
                _meta: $crate::config::define::Meta,
                out: &mut Vec<$crate::config::define::SettingInfo>,
            ) {
                $crate::config::define::Section::describe_all(self, out);
            }

            fn take(
                &mut self,
                key: &'static str,
                item: $crate::config::define::Item,
                _meta: &$crate::config::define::Meta,
            ) -> Result<(), $crate::config::ConfigError> {
                $crate::config::define::Section::take_all(self, item.into_table(key)?)
            }

            fn check(
                &self,
                _key: &'static str,
                _meta: &$crate::config::define::Meta,
            ) -> Result<(), $crate::config::ConfigError> {
                $crate::config::define::Section::check_all(self)
            }

            fn write(&self, _meta: &$crate::config::define::Meta) -> Option<toml::Value> {
                let table = $crate::config::define::Section::write_all(self);
                (!table.is_empty()).then_some(toml::Value::Table(table))
            }

            fn restarts(
                &self,
                new: &Self,
                key: &'static str,
                _meta: &$crate::config::define::Meta,
                out: &mut Vec<&'static str>,
            ) {
                if <Self as $crate::config::define::Section>::any_live() {
                    $crate::config::define::Section::restarts_all(self, new, out);
                } else if self != new {
                    out.push(key);
                }
            }

            fn take_live(&mut self, new: &Self, _meta: &$crate::config::define::Meta) {
                $crate::config::define::Section::take_live_all(self, new);
            }
        }
    };
}

/// The file key of a field in the section `prefix` (`""`: the file's top level).
macro_rules! key {
    ($prefix:literal, $field:ident) => {
        concat!($prefix, ".", stringify!($field)).trim_start_matches('.')
    };
}

pub(crate) use {key, settings};

// === impl Meta ===

impl Meta {
    /// A setting of the config file only.
    pub const FILE: Meta = Meta {
        flag: false,
        former_flag: None,
        value_name: None,
        live: false,
        secret: false,
        bound: None,
        nonzero: false,
        default_text: None,
        hint: None,
        required: false,
    };

    /// A setting that is also a flag and an environment variable, named after its key.
    pub const FLAG: Meta = Meta {
        flag: true,
        ..Meta::FILE
    };

    /// Its flag was called `--<name>` (and its variable `STRONGSYNC_<NAME>`) before.
    pub const fn formerly(self, name: &'static str) -> Meta {
        Meta {
            former_flag: Some(name),
            ..self
        }
    }

    /// A reload applies it.
    pub const fn live(self) -> Meta {
        Meta { live: true, ..self }
    }

    /// Never shown.
    pub const fn secret(self) -> Meta {
        Meta {
            secret: true,
            ..self
        }
    }

    /// An integer from `min` to `max`.
    pub const fn range(self, min: u64, max: u64) -> Meta {
        Meta {
            bound: Some(Bound::Between(min, max)),
            ..self
        }
    }

    /// An integer of `min` or more.
    pub const fn at_least(self, min: u64) -> Meta {
        Meta {
            bound: Some(Bound::AtLeast(min)),
            ..self
        }
    }

    /// An integer of `max` or less.
    pub const fn at_most(self, max: u64) -> Meta {
        Meta {
            bound: Some(Bound::AtMost(max)),
            ..self
        }
    }

    /// Says more of an out-of-bounds value: `hint` follows what is wrong with it.
    pub const fn hint(self, hint: &'static str) -> Meta {
        Meta {
            hint: Some(hint),
            ..self
        }
    }

    /// A duration above zero.
    pub const fn nonzero(self) -> Meta {
        Meta {
            nonzero: true,
            ..self
        }
    }

    /// It must be given.
    pub const fn required(self) -> Meta {
        Meta {
            required: true,
            ..self
        }
    }

    /// The flag's value looks like `name` in `--help`.
    pub const fn value_name(self, name: &'static str) -> Meta {
        Meta {
            value_name: Some(name),
            ..self
        }
    }

    /// The default in words (the docs and `--help` say it instead of the value).
    pub const fn default_text(self, text: &'static str) -> Meta {
        Meta {
            default_text: Some(text),
            ..self
        }
    }
}

// === impl SettingInfo ===

impl SettingInfo {
    /// Its flag without the dashes (`durability-quorum`), if it has one: its key, with `-` for
    /// `.` and `_`.
    pub fn flag(&self) -> Option<String> {
        self.meta.flag.then(|| self.key.replace(['.', '_'], "-"))
    }

    /// Its environment variable (`STRONGSYNC_DURABILITY_QUORUM`), if it has a flag.
    pub fn env(&self) -> Option<String> {
        self.flag().map(|flag| env_of(&flag))
    }

    /// The environment variable of its former flag, if it had one.
    pub fn former_env(&self) -> Option<String> {
        self.meta.former_flag.map(env_of)
    }

    /// Its default in words: the setting's own, the value as the file writes it (a string
    /// without its quotes), or none.
    pub fn default_words(&self) -> Option<String> {
        if self.meta.required {
            return None;
        }
        self.meta.default_text.map(str::to_owned).or_else(|| {
            self.default
                .as_deref()
                .map(|value| value.trim_matches('"').to_owned())
        })
    }
}

// === impl Layer ===

impl Layer {
    /// What a config file says.
    pub fn from_file(table: toml::Table) -> Layer {
        let items = table
            .into_iter()
            .map(|(key, value)| match value {
                toml::Value::Table(table) => (key, Item::Table(Layer::from_file(table))),
                value => (key, Item::File(value)),
            })
            .collect();
        Layer { items }
    }

    /// A flag or an environment variable set `key` (dotted: `durability.quorum`) to `text`; it
    /// wins over what the file says.
    pub fn set_flag(&mut self, key: &str, text: String) {
        match key.split_once('.') {
            None => {
                self.items.insert(key.to_owned(), Item::Flag(text));
            }
            Some((section, rest)) => {
                let item = self
                    .items
                    .entry(section.to_owned())
                    .or_insert_with(|| Item::Table(Layer::default()));
                if !matches!(item, Item::Table(_)) {
                    *item = Item::Table(Layer::default());
                }
                if let Item::Table(layer) = item {
                    layer.set_flag(rest, text);
                }
            }
        }
    }

    /// Sets `key` (dotted) to `text` unless the layer already says something of it.
    pub fn set_unless_given(&mut self, key: &str, text: String) {
        let given = match key.split_once('.') {
            None => self.items.contains_key(key),
            Some((section, rest)) => match self.items.get(section) {
                Some(Item::Table(layer)) => layer.items.contains_key(rest),
                Some(_) => true,
                None => false,
            },
        };
        if !given {
            self.set_flag(key, text);
        }
    }

    /// The layer as the file's table again.
    fn into_file_table(self) -> toml::Table {
        self.items
            .into_iter()
            .map(|(key, item)| {
                let value = match item {
                    Item::File(value) => value,
                    Item::Flag(text) => toml::Value::String(text),
                    Item::Table(layer) => toml::Value::Table(layer.into_file_table()),
                };
                (key, value)
            })
            .collect()
    }

    /// Forgets what the layer says of `key` (dotted).
    pub fn unset(&mut self, key: &str) {
        match key.split_once('.') {
            None => {
                self.items.remove(key);
            }
            Some((section, rest)) => {
                if let Some(Item::Table(layer)) = self.items.get_mut(section) {
                    layer.unset(rest);
                }
            }
        }
    }

    /// Takes what the layer says of `key`, if anything.
    pub fn take(&mut self, key: &str) -> Option<Item> {
        self.items.remove(key)
    }

    /// Every key left is one no setting of the section `prefix` has.
    pub fn refuse_the_rest(self, prefix: &str) -> Result<(), ConfigError> {
        match self.items.into_keys().next() {
            None => Ok(()),
            Some(key) if prefix.is_empty() => Err(ConfigError::Unknown { key }),
            Some(key) => Err(ConfigError::Unknown {
                key: format!("{prefix}.{key}"),
            }),
        }
    }
}

// === impl Item ===

impl Item {
    /// The table a section is read from.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if the file gives a value where a table belongs.
    pub fn into_table(self, key: &'static str) -> Result<Layer, ConfigError> {
        match self {
            Item::Table(layer) => Ok(layer),
            Item::File(_) | Item::Flag(_) => Err(ConfigError::Invalid {
                key,
                problem: "expected a table of settings".into(),
            }),
        }
    }
}

// === impl Field for values ===

impl<T: Value> Field for T {
    fn describe(
        &self,
        key: &'static str,
        doc: &'static str,
        meta: Meta,
        out: &mut Vec<SettingInfo>,
    ) {
        out.push(SettingInfo {
            key,
            doc: words(doc),
            meta,
            value_name: meta.value_name.unwrap_or(T::VALUE_NAME),
            default: self
                .to_file()
                .filter(|_| !meta.secret)
                .map(|v| v.to_string()),
        });
    }

    fn take(&mut self, key: &'static str, item: Item, meta: &Meta) -> Result<(), ConfigError> {
        let value = match item {
            Item::File(value) => T::from_file(value),
            Item::Flag(text) => T::from_flag(&text),
            // An inline table in the file, such as a replica's labels.
            Item::Table(layer) => T::from_file(toml::Value::Table(layer.into_file_table())),
        };
        *self = value.map_err(|problem| ConfigError::Value {
            key,
            problem,
            hint: None,
        })?;
        Field::check(self, key, meta)
    }

    fn check(&self, key: &'static str, meta: &Meta) -> Result<(), ConfigError> {
        Value::check(self, meta).map_err(|problem| ConfigError::Value {
            key,
            problem,
            hint: meta.hint,
        })
    }

    fn write(&self, meta: &Meta) -> Option<toml::Value> {
        self.to_file().filter(|_| !meta.secret)
    }

    fn restarts(&self, new: &Self, key: &'static str, meta: &Meta, out: &mut Vec<&'static str>) {
        if !meta.live && self != new {
            out.push(key);
        }
    }

    fn take_live(&mut self, new: &Self, meta: &Meta) {
        if meta.live {
            self.clone_from(new);
        }
    }
}

/// The environment variable of the flag `--<flag>`.
fn env_of(flag: &str) -> String {
    format!("STRONGSYNC_{}", flag.replace('-', "_").to_uppercase())
}

/// A doc comment as one paragraph of words.
fn words(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}
