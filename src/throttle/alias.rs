//! Reading the arguments of a `throttle:...` alias, as Laravel reads
//! `throttle:60,1`.

use super::middleware::ThrottleRequestsMiddleware;

/// Why the arguments of a `throttle` alias were refused. The route that
/// names the alias then fails to register, with this reason in its error.
///
/// ```
/// use suprnova::ThrottleRequestsMiddleware;
///
/// let err = ThrottleRequestsMiddleware::from_alias_args(&["60", "0"]).unwrap_err();
/// assert_eq!(err.to_string(), "the window of `throttle` must be at least 1 minute, got `0`");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ThrottleAliasError {
    /// An argument that stands for a number is not a whole positive number.
    #[error("the {what} of `throttle` must be a whole number, got `{value}`")]
    NotANumber {
        /// Which number: `limit`, `guest limit`, `user limit`, `window`.
        what: &'static str,
        /// The argument as written.
        value: String,
    },
    /// A limit of zero, which would refuse every request.
    #[error("the {what} of `throttle` must be at least 1, got `{value}`")]
    ZeroLimit {
        /// `limit`, `guest limit` or `user limit`.
        what: &'static str,
        /// The argument as written.
        value: String,
    },
    /// A window of zero minutes, which opens no window: it would count
    /// and limit only in a window another limit opened on its key.
    #[error("the window of `throttle` must be at least 1 minute, got `{value}`")]
    ZeroWindow {
        /// The argument as written.
        value: String,
    },
    /// More than the three arguments `limit,window,prefix`.
    #[error(
        "`throttle` takes at most three arguments (limit, window in minutes, prefix), got {count}"
    )]
    TooManyArguments {
        /// How many were given.
        count: usize,
    },
    /// A limiter name followed by more arguments.
    #[error("`throttle:{name}` names a rate limiter, which takes no further arguments")]
    ArgumentsAfterLimiterName {
        /// The limiter name.
        name: String,
    },
}

/// What the first argument of the alias says.
enum First<'a> {
    /// A limit for everybody, or a guest's and a signed-in user's.
    Limits { guest: i64, user: i64 },
    /// A named limiter.
    Name(&'a str),
}

impl ThrottleRequestsMiddleware {
    /// Builds the middleware from the arguments of a `throttle` alias, read
    /// as Laravel reads `throttle:60,1`. Register it once at boot:
    ///
    /// ```
    /// use suprnova::middleware::register_middleware_alias_with_args;
    /// use suprnova::{HttpResponse, Router, ThrottleRequestsMiddleware};
    ///
    /// register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
    ///
    /// let router = Router::new()
    ///     .post("/login", |_req| async { HttpResponse::text("welcome") })
    ///     .middleware_named("throttle:5,1");
    /// assert!(router.validate().is_ok());
    ///
    /// let refused = Router::new()
    ///     .post("/login", |_req| async { HttpResponse::text("welcome") })
    ///     .try_middleware_named("throttle:five,1")
    ///     .unwrap_err();
    /// assert!(refused.to_string().contains("names a rate limiter"));
    /// ```
    ///
    /// | arguments | middleware |
    /// | --- | --- |
    /// | none | [`ThrottleRequestsMiddleware::default()`]: 60 a minute for each user, or each address, across routes |
    /// | `60` | 60 a minute, for each user or address on each path: [`with(60, 1, "")`](Self::with) |
    /// | `60,1` | the same, the window given in minutes |
    /// | `60,1,login` | the same, with the key prefix `login` |
    /// | `10\|60,1` | 10 a minute for a guest, 60 for a signed-in user ([`Request::user_id`](crate::Request::user_id)) |
    /// | `api` | the named limiter `api`: [`by_name("api")`](Self::by_name), looked up at request time |
    ///
    /// A first argument that is a number as PHP's `is_numeric` reads one
    /// (digits, with a sign, a point, an exponent or blanks around them), or
    /// two such numbers joined by `|`, is read as a limit; any other first
    /// argument names a limiter, as Laravel looks up a limiter by any name
    /// that is not a number: `throttle:2fa` names the limiter `2fa`, and
    /// `throttle:api|v2` or `throttle:5|api` the limiter of that name.
    /// Numbers are whole and positive: unlike Laravel, `1.5` or `1e1` are
    /// refused rather than truncated (in either half of `guest|user` too),
    /// and the window is whole minutes. As in Laravel, a `+` before the
    /// digits and blanks around the `|` are taken, and a number past the
    /// largest `i64` is the largest.
    ///
    /// # Errors
    ///
    /// [`ThrottleAliasError`], with the reason, for a number that does not
    /// parse, a limit or a window of zero (either half of `guest|user`
    /// included), more than three arguments, and arguments after a limiter
    /// name.
    pub fn from_alias_args(args: &[&str]) -> Result<Self, ThrottleAliasError> {
        if args.len() > 3 {
            return Err(ThrottleAliasError::TooManyArguments { count: args.len() });
        }
        let Some(first) = args.first() else {
            return Ok(Self::default());
        };
        let (guest, user) = match read_first(first)? {
            First::Name(name) if args.len() == 1 => return Ok(Self::by_name(name)),
            First::Name(name) => {
                return Err(ThrottleAliasError::ArgumentsAfterLimiterName {
                    name: name.to_owned(),
                });
            }
            First::Limits { guest, user } => (guest, user),
        };
        let decay_minutes = match args.get(1) {
            Some(value) => read_window(value)?,
            None => 1,
        };
        let prefix = args.get(2).copied().unwrap_or("");
        Ok(Self::with_guest_and_user(
            guest,
            user,
            decay_minutes,
            prefix,
        ))
    }
}

fn read_first(value: &str) -> Result<First<'_>, ThrottleAliasError> {
    if let Some((guest, user)) = value.split_once('|')
        // Two numbers joined by `|` are the two limits; anything else with
        // a `|` (`api|v2`, `5|api`, `|10`) is no number, so it names a
        // limiter.
        && is_numeric(guest)
        && is_numeric(user)
    {
        // The arguments are trimmed, but blanks around the `|` stay in
        // its halves: `10 | 60` is 10 and 60, as PHP reads each half.
        return Ok(First::Limits {
            guest: read_limit("guest limit", trim_php_blanks(guest))?,
            user: read_limit("user limit", trim_php_blanks(user))?,
        });
    }
    if value.is_empty() || is_numeric(value) {
        let limit = read_limit("limit", value)?;
        Ok(First::Limits {
            guest: limit,
            user: limit,
        })
    } else {
        Ok(First::Name(value))
    }
}

fn read_limit(what: &'static str, value: &str) -> Result<i64, ThrottleAliasError> {
    match whole_number(value) {
        Some(0) => Err(ThrottleAliasError::ZeroLimit {
            what,
            value: value.to_owned(),
        }),
        Some(n) => Ok(n),
        None => Err(ThrottleAliasError::NotANumber {
            what,
            value: value.to_owned(),
        }),
    }
}

fn read_window(value: &str) -> Result<i64, ThrottleAliasError> {
    match whole_number(value) {
        Some(0) => Err(ThrottleAliasError::ZeroWindow {
            value: value.to_owned(),
        }),
        Some(n) => Ok(n),
        None => Err(ThrottleAliasError::NotANumber {
            what: "window",
            value: value.to_owned(),
        }),
    }
}

/// Whether PHP's `is_numeric` takes `value` for a number: blanks, an
/// optional sign, digits with an optional point (at least one digit), an
/// optional exponent, blanks. A limiter name is any first argument that is
/// not one.
fn is_numeric(value: &str) -> bool {
    let value = trim_php_blanks(value);
    let value = value.strip_prefix(['+', '-']).unwrap_or(value);
    let (mantissa, exponent) = match value.find(['e', 'E']) {
        Some(at) => (&value[..at], Some(&value[at + 1..])),
        None => (value, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    let mantissa_is_number =
        digits(whole) && digits(fraction) && !(whole.is_empty() && fraction.is_empty());
    let exponent_is_number = exponent.is_none_or(|exponent| {
        let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        !exponent.is_empty() && digits(exponent)
    });
    mantissa_is_number && exponent_is_number
}

/// `value` without the blanks PHP's `is_numeric` allows around a number.
fn trim_php_blanks(value: &str) -> &str {
    value.trim_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
}

/// ASCII digits, after an optional `+` (no `-`, no point, no exponent); one
/// past `i64` is `i64::MAX`, as PHP's `(int)` reads it.
fn whole_number(value: &str) -> Option<i64> {
    let digits = value.strip_prefix('+').unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_only() {
        assert_eq!(whole_number("60"), Some(60));
        assert_eq!(whole_number("007"), Some(7));
        assert_eq!(whole_number("+1"), Some(1));
        assert_eq!(whole_number("99999999999999999999"), Some(i64::MAX));
        for bad in ["", "+", "-1", "1.5", "1e1", " 1", "+-1", "++1"] {
            assert_eq!(whole_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn numbers_as_php_reads_them() {
        for number in [
            "60",
            "007",
            "+1",
            "-1",
            "1.5",
            ".5",
            "5.",
            "1e1",
            "1E+1",
            "2.5e-3",
            " 1",
            "1 ",
            "\t1\n",
            "99999999999999999999",
        ] {
            assert!(is_numeric(number), "{number:?}");
        }
        for name in [
            "", ".", "+", "e1", "1e", "1e+", "1.2.3", "2fa", "1_000", "0x1A", "inf", "NaN", "1 1",
            "api",
        ] {
            assert!(!is_numeric(name), "{name:?}");
        }
    }

    #[test]
    fn the_first_argument_is_a_name_unless_it_is_a_number() {
        assert!(matches!(read_first("api"), Ok(First::Name("api"))));
        assert!(matches!(read_first("_x"), Ok(First::Name("_x"))));
        assert!(matches!(read_first("2fa"), Ok(First::Name("2fa"))));
        assert!(matches!(read_first("0x1A"), Ok(First::Name("0x1A"))));
        for name in ["api|v2", "api|5", "5|api", "|5", "5|"] {
            assert!(
                matches!(read_first(name), Ok(First::Name(n)) if n == name),
                "{name:?}"
            );
        }
        assert!(matches!(
            read_first("2|5"),
            Ok(First::Limits { guest: 2, user: 5 })
        ));
        for refused in ["", "1.5", "1e1", "-1", " 1"] {
            assert!(
                matches!(
                    read_first(refused),
                    Err(ThrottleAliasError::NotANumber { what: "limit", .. })
                ),
                "{refused:?}"
            );
        }
        for (refused, half) in [("1.5|2", "guest limit"), ("2|1e1", "user limit")] {
            assert!(
                matches!(
                    read_first(refused),
                    Err(ThrottleAliasError::NotANumber { what, .. }) if what == half
                ),
                "{refused:?}"
            );
        }
    }
}
