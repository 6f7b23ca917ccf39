//! `APP_ENV`: which kind of deployment this process is.

use std::fmt;
use std::str::FromStr;

use super::{ConfigError, Env};

/// The application environment, read from `APP_ENV`.
///
/// Only [`Environment::Production`] changes behaviour: it refuses to boot on
/// the in-memory rate limiter (see
/// [`bootstrap_from_env`](crate::bootstrap::bootstrap_from_env)). Staging is
/// deliberately not gated.
///
/// ```
/// use suprnova::config::{Env, Environment};
///
/// let env = Env::from_pairs([("APP_ENV", "staging")]);
/// assert_eq!(Environment::from_env(&env).unwrap(), Environment::Staging);
/// assert!(Environment::from_env(&Env::from_pairs([("APP_ENV", "prod")])).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Environment {
    /// A live deployment.
    Production,
    /// A pre-production deployment.
    Staging,
    /// Automated tests.
    Testing,
    /// A developer's machine (Laravel's default spelling).
    Local,
    /// A developer's machine.
    Development,
}

impl Environment {
    /// The variable this is read from.
    pub const VARIABLE: &'static str = "APP_ENV";

    /// Reads `APP_ENV`. Unset means [`Environment::Production`], as in
    /// Laravel's `config/app.php`: a deployment that forgot the variable gets
    /// the strict checks, not the lenient ones.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match env.text(Self::VARIABLE)? {
            None => Ok(Environment::Production),
            Some(raw) => raw.parse().map_err(|reason: String| ConfigError::Invalid {
                variable: Self::VARIABLE.to_owned(),
                value: raw,
                reason,
            }),
        }
    }

    /// The canonical spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Staging => "staging",
            Environment::Testing => "testing",
            Environment::Local => "local",
            Environment::Development => "development",
        }
    }

    /// Whether this is [`Environment::Production`].
    pub fn is_production(self) -> bool {
        self == Environment::Production
    }
}

impl FromStr for Environment {
    type Err = String;

    /// Parses the canonical spellings, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "production" => Ok(Environment::Production),
            "staging" => Ok(Environment::Staging),
            "testing" => Ok(Environment::Testing),
            "local" => Ok(Environment::Local),
            "development" => Ok(Environment::Development),
            _ => {
                Err("expected one of production, staging, testing, local or development".to_owned())
            }
        }
    }
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_is_production() {
        assert_eq!(
            Environment::from_env(&Env::from_pairs::<&str, &str>([])).unwrap(),
            Environment::Production
        );
    }

    #[test]
    fn every_spelling_parses() {
        for name in [
            "production",
            "staging",
            "testing",
            "local",
            "development",
            "Local",
        ] {
            let env = Env::from_pairs([("APP_ENV", name)]);
            assert_eq!(
                Environment::from_env(&env).unwrap().as_str(),
                name.to_ascii_lowercase()
            );
        }
    }

    #[test]
    fn unknown_value_is_refused_with_the_variable() {
        let err = Environment::from_env(&Env::from_pairs([("APP_ENV", "prod")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("APP_ENV") && err.contains("prod"), "{err}");
    }
}
