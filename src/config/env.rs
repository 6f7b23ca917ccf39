//! Reading configuration from the environment without touching it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::ConfigError;

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// A source of configuration variables.
///
/// [`Env::process`] reads the process environment; [`Env::from_pairs`] and
/// [`Env::from_lookup`] let tests pass a map, so that no test calls
/// `std::env::set_var` (which is `unsafe` in edition 2024 and races other
/// tests).
///
/// A value that is empty or only whitespace counts as unset, as it does in a
/// `.env` file line such as `RATE_LIMIT_DRIVER=`. A value of the process
/// environment that is not UTF-8 is read with each bad byte as U+FFFD, and
/// every reader but [`get`](Self::get) refuses a value that holds U+FFFD,
/// naming the variable: such a value is never read as unset, nor used as
/// something other than what was written.
///
/// ```
/// use suprnova::config::Env;
///
/// let env = Env::from_pairs([("PORT", "8081"), ("RATE_LIMIT_DRIVER", " ")]);
/// assert_eq!(env.parse::<u16>("PORT").unwrap(), Some(8081));
/// assert_eq!(env.get("RATE_LIMIT_DRIVER"), None);
/// ```
#[derive(Clone)]
pub struct Env {
    lookup: Arc<Lookup>,
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self::from_lookup(|name| std::env::var_os(name).map(lossy))
    }

    /// Variables given by a closure.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self {
            lookup: Arc::new(lookup),
        }
    }

    /// Variables given as name and value pairs.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let map: HashMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self::from_lookup(move |name| map.get(name).cloned())
    }

    /// This source, with `value` for `name` when the source leaves it unset
    /// or blank. Every other variable reads as the source gives it (a blank
    /// `CACHE_PREFIX` stays blank: no prefix).
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("A", "1")]).with_default("B", "2").with_default("A", "9");
    /// assert_eq!(env.get("A").as_deref(), Some("1"));
    /// assert_eq!(env.get("B").as_deref(), Some("2"));
    /// ```
    pub fn with_default(self, name: &str, value: &str) -> Self {
        let (name, value) = (name.to_owned(), value.to_owned());
        let inner = self.lookup;
        Self::from_lookup(move |asked| {
            let found = inner(asked);
            if asked != name {
                return found;
            }
            found
                .filter(|v| !v.trim().is_empty())
                .or_else(|| Some(value.clone()))
        })
    }

    /// The value of `name`, trimmed; `None` when unset or blank.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    /// The value of `name`, trimmed, as [`get`](Self::get) reads it; a value
    /// that holds U+FFFD, the character a byte outside UTF-8 is read as, is
    /// an error naming the variable.
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("PREFIX", " app: "), ("BAD", "app\u{FFFD}:")]);
    /// assert_eq!(env.text("PREFIX").unwrap().as_deref(), Some("app:"));
    /// assert_eq!(
    ///     env.text("BAD").unwrap_err().to_string(),
    ///     "BAD=\"app\u{FFFD}:\" is invalid: it holds bytes that are not UTF-8 (each shown as \u{FFFD}); write the value in UTF-8"
    /// );
    /// ```
    pub fn text(&self, name: &str) -> Result<Option<String>, ConfigError> {
        match self.get(name) {
            Some(raw) if raw.contains(char::REPLACEMENT_CHARACTER) => Err(ConfigError::Invalid {
                variable: name.to_owned(),
                value: raw,
                reason: NOT_UTF8.to_owned(),
            }),
            other => Ok(other),
        }
    }

    /// The value of `name` as Laravel's `env()` reads a string setting:
    /// trimmed; `Some("")` when it is set but blank, or written `empty`,
    /// `null` or `false` (with or without parentheses, in any case: the
    /// empty string, null and false, which PHP makes an empty string of),
    /// where [`text`](Self::text) takes a blank for unset; `Some("1")` for
    /// `true`; any other value wrapped in one pair of matching quotes
    /// without them (as a Docker `--env-file` passes `A="x"`). `None` only
    /// when unset. For the settings a Laravel application and this crate
    /// must read alike, such as the cache's key prefixes and the Redis
    /// password.
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([
    ///     ("A", ""),
    ///     ("B", "(empty)"),
    ///     ("C", " app_ "),
    ///     ("D", "NULL"),
    ///     ("E", "\"shop_\""),
    ///     ("F", "'null'"),
    /// ]);
    /// assert_eq!(env.laravel_text("A").unwrap().as_deref(), Some(""));
    /// assert_eq!(env.laravel_text("B").unwrap().as_deref(), Some(""));
    /// assert_eq!(env.laravel_text("C").unwrap().as_deref(), Some("app_"));
    /// assert_eq!(env.laravel_text("D").unwrap().as_deref(), Some(""));
    /// assert_eq!(env.laravel_text("E").unwrap().as_deref(), Some("shop_"));
    /// // The words are read before the quotes: a quoted word is the word.
    /// assert_eq!(env.laravel_text("F").unwrap().as_deref(), Some("null"));
    /// assert_eq!(env.laravel_text("UNSET").unwrap(), None);
    /// ```
    pub fn laravel_text(&self, name: &str) -> Result<Option<String>, ConfigError> {
        if (self.lookup)(name).is_none() {
            return Ok(None);
        }
        let Some(value) = self.text(name)? else {
            return Ok(Some(String::new()));
        };
        let word = value.strip_prefix('(').and_then(|v| v.strip_suffix(')'));
        let word = word.unwrap_or(&value).to_ascii_lowercase();
        Ok(Some(match word.as_str() {
            "empty" | "null" | "false" => String::new(),
            "true" => "1".to_owned(),
            _ => unquoted(&value).to_owned(),
        }))
    }

    /// As [`text`](Self::text), for a password: a refusal does not show the
    /// value.
    pub fn secret(&self, name: &str) -> Result<Option<String>, ConfigError> {
        self.text(name).map_err(hidden)
    }

    /// A credential as Laravel's `env()` reads it ([`laravel_text`](Self::laravel_text)),
    /// `None` when unset or when that reading is empty: the
    /// `REDIS_PASSWORD=null` of Laravel's skeleton `.env` is no password,
    /// as the Laravel application sharing the Redis reads it. A refusal
    /// does not show the value.
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("P", "null"), ("Q", "\"s3cret\"")]);
    /// assert_eq!(env.laravel_secret("P").unwrap(), None);
    /// assert_eq!(env.laravel_secret("Q").unwrap().as_deref(), Some("s3cret"));
    /// ```
    pub fn laravel_secret(&self, name: &str) -> Result<Option<String>, ConfigError> {
        Ok(self
            .laravel_text(name)
            .map_err(hidden)?
            .filter(|value| !value.is_empty()))
    }

    /// The value of `name` parsed as `T`; an error names the variable, the
    /// value, and the form expected (for the number types, their range).
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("PORT", "eighty")]);
    /// assert_eq!(
    ///     env.parse::<u16>("PORT").unwrap_err().to_string(),
    ///     "PORT=\"eighty\" is invalid: expected a whole number from 0 to 65535 (invalid digit found in string)"
    /// );
    /// ```
    pub fn parse<T>(&self, name: &str) -> Result<Option<T>, ConfigError>
    where
        T: std::str::FromStr,
        T::Err: fmt::Display,
    {
        match self.text(name)? {
            None => Ok(None),
            Some(raw) => raw
                .parse::<T>()
                .map(Some)
                .map_err(|e| ConfigError::Invalid {
                    variable: name.to_owned(),
                    value: raw.clone(),
                    reason: match expected_form::<T>() {
                        Some(form) => format!("expected {form} ({e})"),
                        None => e.to_string(),
                    },
                }),
        }
    }

    /// The value of `name` as a whole number within `range`; an error names
    /// the variable, the value, and the range as `what` calls its numbers.
    ///
    /// ```
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("PORT", "8080"), ("BAD", "0")]);
    /// assert_eq!(env.number_in("PORT", 1..=65535, "a port").unwrap(), Some(8080));
    /// assert_eq!(
    ///     env.number_in("BAD", 1..=65535, "a port").unwrap_err().to_string(),
    ///     "BAD=\"0\" is invalid: expected a port from 1 to 65535"
    /// );
    /// ```
    pub fn number_in(
        &self,
        name: &str,
        range: std::ops::RangeInclusive<u64>,
        what: &str,
    ) -> Result<Option<u64>, ConfigError> {
        let Some(raw) = self.text(name)? else {
            return Ok(None);
        };
        match raw.parse::<u64>() {
            Ok(number) if range.contains(&number) => Ok(Some(number)),
            _ => Err(ConfigError::Invalid {
                variable: name.to_owned(),
                value: raw,
                reason: format!("expected {what} from {} to {}", range.start(), range.end()),
            }),
        }
    }

    /// The value of `name` as a duration in whole milliseconds above zero:
    /// a zero timeout would fail every call, and a unit suffix (`500ms`,
    /// `1s`) is a likely slip, so both are errors naming the variable.
    ///
    /// ```
    /// use std::time::Duration;
    /// use suprnova::config::Env;
    ///
    /// let env = Env::from_pairs([("T", "250"), ("Z", "0")]);
    /// assert_eq!(env.positive_millis("T").unwrap(), Some(Duration::from_millis(250)));
    /// assert_eq!(env.positive_millis("UNSET").unwrap(), None);
    /// assert_eq!(
    ///     env.positive_millis("Z").unwrap_err().to_string(),
    ///     "Z=\"0\" is invalid: expected a whole number of milliseconds above 0, such as 250"
    /// );
    /// ```
    pub fn positive_millis(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        let Some(raw) = self.text(name)? else {
            return Ok(None);
        };
        match raw.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Some(Duration::from_millis(ms))),
            _ => Err(ConfigError::Invalid {
                variable: name.to_owned(),
                value: raw,
                reason: "expected a whole number of milliseconds above 0, such as 250".to_owned(),
            }),
        }
    }

    /// The value of `name` as a boolean: `true`, `1`, `yes`, `on` or `false`,
    /// `0`, `no`, `off`, in any case. Anything else is an error naming the
    /// variable.
    pub fn flag(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        let Some(raw) = self.text(name)? else {
            return Ok(None);
        };
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(ConfigError::Invalid {
                variable: name.to_owned(),
                value: raw,
                reason: "expected true or false (or 1 and 0, yes and no, on and off)".to_owned(),
            }),
        }
    }
}

/// `value` without one pair of matching quotes around it, as Laravel's
/// `env()` takes them off; `value` itself when it has none.
fn unquoted(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// An error of a secret's reading, its value hidden.
fn hidden(error: ConfigError) -> ConfigError {
    match error {
        ConfigError::Invalid {
            variable, reason, ..
        } => ConfigError::Invalid {
            variable,
            value: "(hidden)".to_owned(),
            reason,
        },
        other => other,
    }
}

/// Why a value holding U+FFFD is refused.
const NOT_UTF8: &str =
    "it holds bytes that are not UTF-8 (each shown as \u{FFFD}); write the value in UTF-8";

/// A value of the process environment as text, each byte outside UTF-8
/// turned into U+FFFD, so that a reader refuses it rather than read it as
/// unset.
fn lossy(value: std::ffi::OsString) -> String {
    value
        .into_string()
        .unwrap_or_else(|raw| raw.to_string_lossy().into_owned())
}

/// What a value of `T` must look like, for the types a setting is read as:
/// the number types with their range. `None` for others, whose parse error
/// says it.
fn expected_form<T>() -> Option<String> {
    macro_rules! whole {
        ($($t:ty),*) => {
            $(
                if std::any::type_name::<T>() == std::any::type_name::<$t>() {
                    return Some(format!("a whole number from {} to {}", <$t>::MIN, <$t>::MAX));
                }
            )*
        };
    }
    whole!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);
    if std::any::type_name::<T>() == std::any::type_name::<f64>()
        || std::any::type_name::<T>() == std::any::type_name::<f32>()
    {
        return Some("a number".to_owned());
    }
    None
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Env { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_is_unset_and_values_are_trimmed() {
        let env = Env::from_pairs([("A", "  x "), ("B", ""), ("C", "   ")]);
        assert_eq!(env.get("A").as_deref(), Some("x"));
        assert_eq!(env.get("B"), None);
        assert_eq!(env.get("C"), None);
        assert_eq!(env.get("D"), None);
    }

    #[test]
    fn parse_errors_name_variable_value_and_expected_form() {
        let env = Env::from_pairs([
            ("PORT", "eighty"),
            ("DB", "-1"),
            ("RATIO", "x"),
            ("IP", "y"),
        ]);
        assert_eq!(
            env.parse::<u16>("PORT").unwrap_err().to_string(),
            "PORT=\"eighty\" is invalid: expected a whole number from 0 to 65535 (invalid digit found in string)"
        );
        assert_eq!(
            env.parse::<u32>("DB").unwrap_err().to_string(),
            "DB=\"-1\" is invalid: expected a whole number from 0 to 4294967295 (invalid digit found in string)"
        );
        assert_eq!(
            env.parse::<f64>("RATIO").unwrap_err().to_string(),
            "RATIO=\"x\" is invalid: expected a number (invalid float literal)"
        );
        assert_eq!(
            env.parse::<std::net::IpAddr>("IP").unwrap_err().to_string(),
            "IP=\"y\" is invalid: invalid IP address syntax"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_value_that_is_not_utf8_is_refused_by_every_reader_and_never_unset() {
        use std::os::unix::ffi::OsStringExt;
        let read = lossy(std::ffi::OsString::from_vec(
            b"10.0.0.5,\xa0192.0.2.10".to_vec(),
        ));
        assert_eq!(read, "10.0.0.5,\u{FFFD}192.0.2.10");
        let env = Env::from_pairs([("V", read.as_str()), ("N", "8\u{FFFD}")]);
        assert_eq!(env.get("V").as_deref(), Some(read.as_str()));
        for refused in [
            env.text("V").unwrap_err(),
            env.parse::<u16>("N").unwrap_err(),
            env.flag("N").unwrap_err(),
            env.positive_millis("N").unwrap_err(),
        ] {
            assert!(refused.to_string().ends_with(NOT_UTF8), "{refused}");
        }
        assert_eq!(
            env.secret("V").unwrap_err().to_string(),
            format!("V=\"(hidden)\" is invalid: {NOT_UTF8}")
        );
        assert_eq!(env.secret("UNSET").unwrap(), None);
    }

    #[test]
    fn flags() {
        let env = Env::from_pairs([("A", "TRUE"), ("B", "0"), ("C", "maybe")]);
        assert_eq!(env.flag("A").unwrap(), Some(true));
        assert_eq!(env.flag("B").unwrap(), Some(false));
        assert_eq!(env.flag("Z").unwrap(), None);
        let err = env.flag("C").unwrap_err().to_string();
        assert!(err.contains("C") && err.contains("maybe"), "{err}");
    }
}
