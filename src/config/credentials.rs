//! Credentials in URL values, hidden for the errors and logs that show them.

/// Whether `scheme` names a node on this host's Unix socket.
pub(crate) fn is_socket_scheme(scheme: &str) -> bool {
    matches!(scheme, "unix" | "redis+unix")
}

/// The URLs of a comma-separated list: a comma starts a new URL only where
/// a scheme and `://` follow it, so a comma in a password stays in its URL.
pub(crate) fn split_urls(urls: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (comma, _) in urls.match_indices(',') {
        if starts_with_scheme(urls[comma + 1..].trim_start()) {
            pieces.push(&urls[start..comma]);
            start = comma + 1;
        }
    }
    pieces.push(&urls[start..]);
    pieces
}

/// Whether `text` starts with a URL scheme and `://`.
pub(crate) fn starts_with_scheme(text: &str) -> bool {
    text.find("://").is_some_and(|end| {
        end > 0
            && text[..end]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
    })
}

/// The scheme of a URL, before `://`; empty when it has none.
pub(crate) fn scheme_of(url: &str) -> &str {
    url.split_once("://").map_or("", |(scheme, _)| scheme)
}

/// A URL, or a comma-separated list of them, with each one's credentials
/// replaced by `***`: the user and password before `@`, and a Unix socket
/// URL's `user=` and `pass=`. Works on a value that does not parse, for
/// the error that refuses it.
pub(crate) fn redact_credentials(urls: &str) -> String {
    split_urls(urls)
        .into_iter()
        .map(|url| {
            let trimmed = url.trim_start();
            format!(
                "{}{}",
                &url[..url.len() - trimmed.len()],
                redact_one(trimmed)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `text` holds a `?` with a `=` after it: a query pair, which a
/// password written in a URL's user part would hold only by chance.
fn query_pair_before(text: &str) -> bool {
    text.split_once('?')
        .is_some_and(|(_, after)| after.contains('='))
}

fn redact_one(url: &str) -> String {
    // A socket's credentials are in its query, where a password may hold an
    // `@`; a TCP URL's are before its host, where a password may hold a `?`.
    let userinfo_ends = if is_socket_scheme(scheme_of(url)) {
        url.find('?').unwrap_or(url.len())
    } else {
        url.len()
    };
    let shown = match (url.find("://"), url[..userinfo_ends].rfind('@')) {
        // A query pair before the `@`: the `@` may be a query value's (a
        // password given as `?password=a@b`), and what follows it a
        // secret's tail.
        (Some(start), Some(at)) if at > start && query_pair_before(&url[start + 3..at]) => {
            format!("{}***", &url[..start + 3])
        }
        (Some(start), Some(at)) if at > start => {
            format!("{}***{}", &url[..start + 3], &url[at..])
        }
        // A URL whose `://` is mistyped or missing: all before the `@` may
        // be credentials.
        (_, Some(at)) if query_pair_before(&url[..at]) => "***".to_owned(),
        (_, Some(at)) => format!("***{}", &url[at..]),
        _ => url.to_owned(),
    };
    let Some((before, query)) = shown.split_once('?') else {
        return shown;
    };
    // Every value but the two that hold no secret: a password may come in
    // a pair that is not read (`?password=`), which the refusal names.
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("db" | "protocol", _)) | None => pair.to_owned(),
            Some((name, _)) => format!("{name}=***"),
        })
        .collect();
    format!("{before}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_hidden_in_every_node_of_a_value_that_may_not_parse() {
        assert_eq!(
            redact_credentials("redis://u:p@a:1, rediss://:secret@b:2,c:3"),
            "redis://***@a:1, rediss://***@b:2,c:3"
        );
        assert_eq!(redact_credentials("localhost:6379"), "localhost:6379");
        // A password holding the other form's separator hides in full.
        assert_eq!(
            redact_credentials("unix:///run/redis.sock?pass=se@cret&db=1"),
            "unix:///run/redis.sock?pass=***&db=1"
        );
        assert_eq!(
            redact_credentials("redis://app:se?cret@h:6379"),
            "redis://***@h:6379"
        );
        // An `@` in a query value: the host is not told from the secret.
        assert_eq!(
            redact_credentials("redis://h:6379/?password=ad@min"),
            "redis://***"
        );
        assert_eq!(redact_credentials("h:6379/?password=ad@min"), "***");
        // A comma in a password does not start another URL.
        assert_eq!(
            redact_credentials("redis://app:pa,s3cret@h:6379,redis://v:q,r@b:1"),
            "redis://***@h:6379,redis://***@b:1"
        );
        assert_eq!(
            redact_credentials("redis+cluster://app:pa,s3cret@a:7000,b:7001"),
            "redis+cluster://***@a:7000,b:7001"
        );
    }
}
