//! The replies of the crate's scripts: a few integers written into one
//! string, separated by spaces (`"1 5 0 1733222333444555"`).
//!
//! A script could return a Lua table, which Redis sends as an array of
//! integers; but reading an array costs the client a parse of every
//! element, about a thousand instructions each in redis-rs, where one
//! string is one parse and the integers in it take a few dozen more. For a
//! decision that is otherwise a few thousand instructions, the array was
//! the largest part of reading the reply.

use ::redis::{ErrorKind, RedisError};

use super::RedisBackendError;

/// The `N` numbers of a script's reply, in order.
///
/// Fails with an error that quotes the reply when it is not `N` numbers of
/// type `T` separated by single spaces: a script of another version of the
/// crate, or a key written by something else, is reported, not guessed at.
/// A number is decimal digits after an optional `-`, within `i64` (every
/// number the scripts write is: a count, or a time in microseconds).
pub(crate) fn reply_numbers<T: TryFrom<i64> + Copy + Default, const N: usize>(
    reply: &[u8],
) -> Result<[T; N], RedisBackendError> {
    numbers(reply).ok_or_else(|| {
        RedisBackendError::Redis(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "a script's reply is not the numbers it should be",
            format!(
                "expected {N} numbers separated by spaces, got {:?}",
                String::from_utf8_lossy(reply)
            ),
        )))
    })
}

/// The `N` numbers of `reply`, when it is exactly that.
fn numbers<T: TryFrom<i64> + Copy + Default, const N: usize>(reply: &[u8]) -> Option<[T; N]> {
    let mut numbers = [T::default(); N];
    let mut fields = reply.split(|&byte| byte == b' ');
    for number in &mut numbers {
        *number = integer(fields.next()?)?;
    }
    fields.next().is_none().then_some(numbers)
}

/// `field` as an integer of type `T`, read byte by byte: this runs on every
/// decision on Redis, and going through `str` (UTF-8 checks, a string
/// search for the spaces, `FromStr`) cost a reply about 900 instructions.
fn integer<T: TryFrom<i64>>(field: &[u8]) -> Option<T> {
    let (negative, digits) = match field {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &byte in digits {
        // A byte below `0` wraps around to far above 9.
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?;
        // Built on the side of its sign, so that `i64::MIN` fits.
        value = if negative {
            value.checked_sub(i64::from(digit))?
        } else {
            value.checked_add(i64::from(digit))?
        };
    }
    T::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_number_in_order() {
        let numbers: [u64; 4] = reply_numbers(b"0 100 1733222333444555 1733222393444555").unwrap();
        assert_eq!(
            numbers,
            [0, 100, 1_733_222_333_444_555, 1_733_222_393_444_555]
        );
        let signed: [i64; 2] = reply_numbers(b"0 -3").unwrap();
        assert_eq!(signed, [0, -3]);
    }

    #[test]
    fn an_unsigned_reply_refuses_a_sign() {
        assert!(reply_numbers::<u64, 2>(b"1 -5").is_err());
    }

    #[test]
    fn reads_the_extremes_and_refuses_past_them() {
        let extremes: [i64; 3] =
            reply_numbers(b"-9223372036854775808 9223372036854775807 -0").unwrap();
        assert_eq!(extremes, [i64::MIN, i64::MAX, 0]);
        for reply in [
            &b"9223372036854775808"[..],
            b"-9223372036854775809",
            b"99999999999999999999",
        ] {
            assert!(
                reply_numbers::<i64, 1>(reply).is_err(),
                "{:?}",
                String::from_utf8_lossy(reply)
            );
        }
        for reply in [&b"-"[..], b"+1", b"1-", b"0x1", b"1.5", b" 1", b"1/", b"1:"] {
            assert!(
                reply_numbers::<i64, 1>(reply).is_err(),
                "{:?}",
                String::from_utf8_lossy(reply)
            );
        }
    }

    #[test]
    fn refuses_a_reply_of_another_shape_and_quotes_it() {
        for reply in [
            &b""[..],
            b"1",
            b"1 2 3",
            b"1  2",
            b"1 x",
            b"1 2 ",
            b"\xff 2",
        ] {
            let error = reply_numbers::<u64, 2>(reply).expect_err("not two numbers");
            let message = error.to_string();
            assert!(
                message.contains("expected 2 numbers separated by spaces"),
                "{message}"
            );
            assert!(
                message.contains(&format!("{:?}", String::from_utf8_lossy(reply))),
                "{message}"
            );
        }
    }
}
