//! How each kind of setting's value is read from the config file and from a flag, written back
//! (what `check-config` prints) and checked against its bounds: counts, switches, durations like
//! `"10s"`, addresses, text, paths, the policies' words, and nothing at all (an optional value).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::define::{Bound, Meta, Value};
use super::{TextError, ValueError};

/// A password: read like text, never written, shown or logged.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub String);

// === counts ===

macro_rules! count {
    ($($ty:ty),*) => {$(
        impl Value for $ty {
            const VALUE_NAME: &'static str = "N";

            fn from_file(value: toml::Value) -> Result<Self, ValueError> {
                match value {
                    toml::Value::Integer(n) => count_of(n),
                    other => Err(ValueError::Kind {
                        expected: "a whole number",
                        found: other.type_str(),
                    }),
                }
            }

            fn from_flag(text: &str) -> Result<Self, ValueError> {
                let n: i64 = text
                    .trim()
                    .parse()
                    .map_err(|_| ValueError::NotWhole { text: text.to_owned() })?;
                count_of(n)
            }

            fn to_file(&self) -> Option<toml::Value> {
                i64::try_from(*self).ok().map(toml::Value::Integer)
            }

            fn check(&self, meta: &Meta) -> Result<(), ValueError> {
                let n = *self as u64;
                match meta.bound {
                    Some(Bound::Between(min, max)) if !(min..=max).contains(&n) => {
                        Err(ValueError::NotBetween { n, min, max })
                    }
                    Some(Bound::AtLeast(min)) if n < min => Err(ValueError::BelowLeast { min }),
                    Some(Bound::AtMost(max)) if n > max => Err(ValueError::AboveMost { max }),
                    _ => Ok(()),
                }
            }
        }
    )*};
}

count!(usize, u32);

/// A whole number that fits the setting's type.
fn count_of<T: TryFrom<i64>>(n: i64) -> Result<T, ValueError> {
    if n < 0 {
        return Err(ValueError::Negative { n });
    }
    T::try_from(n).map_err(|_| ValueError::TooLarge { n })
}

// === switches ===

impl Value for bool {
    const VALUE_NAME: &'static str = "BOOL";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        value.as_bool().ok_or_else(|| ValueError::Kind {
            expected: "true or false",
            found: value.type_str(),
        })
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(ValueError::NotSwitch {
                text: text.to_owned(),
            }),
        }
    }

    fn to_file(&self) -> Option<toml::Value> {
        Some(toml::Value::Boolean(*self))
    }
}

// === durations ===

impl Value for Duration {
    const VALUE_NAME: &'static str = "DURATION";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        match value {
            toml::Value::String(text) => Self::from_flag(&text),
            other => Err(ValueError::Kind {
                expected: "a duration like \"10s\" or \"250ms\"",
                found: other.type_str(),
            }),
        }
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        humantime::parse_duration(text).map_err(|source| ValueError::NotDuration {
            text: text.to_owned(),
            source,
        })
    }

    fn to_file(&self) -> Option<toml::Value> {
        Some(toml::Value::String(
            humantime::format_duration(*self).to_string(),
        ))
    }

    fn check(&self, meta: &Meta) -> Result<(), ValueError> {
        if meta.nonzero && self.is_zero() {
            return Err(ValueError::Zero);
        }
        Ok(())
    }
}

// === text ===

/// A value read from and written as a string, through its `FromStr` and `Display`.
macro_rules! text {
    ($($ty:ty => $name:literal),* $(,)?) => {$(
        impl Value for $ty {
            const VALUE_NAME: &'static str = $name;

            fn from_file(value: toml::Value) -> Result<Self, ValueError> {
                match value {
                    toml::Value::String(text) => Self::from_flag(&text),
                    other => Err(ValueError::Kind {
                        expected: "a string",
                        found: other.type_str(),
                    }),
                }
            }

            fn from_flag(text: &str) -> Result<Self, ValueError> {
                text.parse().map_err(|e| ValueError::Text {
                    text: text.to_owned(),
                    source: TextError::from(e),
                })
            }

            fn to_file(&self) -> Option<toml::Value> {
                Some(toml::Value::String(self.to_string()))
            }
        }
    )*};
}

text!(
    SocketAddr => "ADDR",
    String => "TEXT",
    super::OnTimeout => "POLICY",
    super::WithoutQuorum => "BEHAVIOUR",
    super::Visibility => "MODE",
    super::AsyncReplicas => "WHEN",
    super::PrimaryTls => "MODE",
);

impl Value for PathBuf {
    const VALUE_NAME: &'static str = "FILE";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        match value {
            toml::Value::String(text) => Ok(PathBuf::from(text)),
            other => Err(ValueError::Kind {
                expected: "a path",
                found: other.type_str(),
            }),
        }
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        Ok(PathBuf::from(text))
    }

    fn to_file(&self) -> Option<toml::Value> {
        Some(toml::Value::String(self.display().to_string()))
    }
}

/// A zone's name: text, never empty (leave a zone out for none).
impl Value for Arc<str> {
    const VALUE_NAME: &'static str = "ZONE";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        match value {
            toml::Value::String(text) => Self::from_flag(&text),
            other => Err(ValueError::Kind {
                expected: "a string",
                found: other.type_str(),
            }),
        }
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        match text.trim() {
            "" => Err(ValueError::EmptyZone),
            zone => Ok(zone.into()),
        }
    }

    fn to_file(&self) -> Option<toml::Value> {
        Some(toml::Value::String(self.to_string()))
    }
}

/// Labels shown in `/status`: a table of strings.
impl Value for BTreeMap<String, String> {
    const VALUE_NAME: &'static str = "LABELS";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        let toml::Value::Table(table) = value else {
            return Err(ValueError::Kind {
                expected: "a table of strings",
                found: value.type_str(),
            });
        };
        table
            .into_iter()
            .map(|(name, value)| match value {
                toml::Value::String(text) => Ok((name, text)),
                other => Err(ValueError::Label {
                    found: other.type_str(),
                    name,
                }),
            })
            .collect()
    }

    fn from_flag(_text: &str) -> Result<Self, ValueError> {
        Err(ValueError::FileOnly { what: "labels" })
    }

    fn to_file(&self) -> Option<toml::Value> {
        (!self.is_empty()).then(|| {
            toml::Value::Table(
                self.iter()
                    .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
                    .collect(),
            )
        })
    }
}

/// A list of addresses: an array of strings in the file, comma-separated in a flag.
impl Value for Vec<String> {
    const VALUE_NAME: &'static str = "URL,...";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        match value {
            toml::Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    toml::Value::String(text) if !text.trim().is_empty() => {
                        Ok(text.trim().to_owned())
                    }
                    other => Err(ValueError::Item {
                        found: other.to_string(),
                    }),
                })
                .collect(),
            toml::Value::String(text) => Self::from_flag(&text),
            other => Err(ValueError::Kind {
                expected: "an array of strings",
                found: other.type_str(),
            }),
        }
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        Ok(text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }

    fn to_file(&self) -> Option<toml::Value> {
        (!self.is_empty())
            .then(|| toml::Value::Array(self.iter().cloned().map(toml::Value::String).collect()))
    }
}

impl Value for Secret {
    const VALUE_NAME: &'static str = "PASSWORD";

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        match value {
            toml::Value::String(text) => Ok(Secret(text)),
            other => Err(ValueError::Kind {
                expected: "a string",
                found: other.type_str(),
            }),
        }
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        Ok(Secret(text.to_owned()))
    }

    fn to_file(&self) -> Option<toml::Value> {
        None
    }
}

// === nothing at all ===

impl<T: Value> Value for Option<T> {
    const VALUE_NAME: &'static str = T::VALUE_NAME;

    fn from_file(value: toml::Value) -> Result<Self, ValueError> {
        T::from_file(value).map(Some)
    }

    fn from_flag(text: &str) -> Result<Self, ValueError> {
        T::from_flag(text).map(Some)
    }

    fn to_file(&self) -> Option<toml::Value> {
        self.as_ref().and_then(T::to_file)
    }

    fn check(&self, meta: &Meta) -> Result<(), ValueError> {
        self.as_ref().map_or(Ok(()), |v| v.check(meta))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(hidden)")
    }
}

/// `a, b or c`.
pub(super) fn either(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [only] => (*only).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}
