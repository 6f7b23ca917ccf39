//! The replies of the crate's scripts: a few integers written into one
//! string, separated by spaces (`"1 5 0 1733222333444555"`).
//!
//! A script could return a Lua table, which Redis sends as an array of
//! integers; but reading an array costs the client a parse of every
//! element, about a thousand instructions each in redis-rs, where one
//! string is one parse and the integers in it take a few dozen more. For a
//! decision that is otherwise a few thousand instructions, the array was
//! the largest part of reading the reply.

use std::str::FromStr;

use ::redis::{ErrorKind, RedisError};

use super::RedisBackendError;

/// The `N` numbers of a script's reply, in order.
///
/// Fails with an error that quotes the reply when it is not `N` numbers of
/// type `T` separated by single spaces: a script of another version of the
/// crate, or a key written by something else, is reported, not guessed at.
pub(crate) fn reply_numbers<T: FromStr + Copy + Default, const N: usize>(
    reply: &[u8],
) -> Result<[T; N], RedisBackendError> {
    let parsed = std::str::from_utf8(reply).ok().and_then(|text| {
        let mut numbers = [T::default(); N];
        let mut fields = text.split(' ');
        for number in &mut numbers {
            *number = fields.next()?.parse().ok()?;
        }
        fields.next().is_none().then_some(numbers)
    });
    parsed.ok_or_else(|| {
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
