//! The server side of the WebSocket opening handshake (RFC 6455, section 4.2).

use http::Method;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::{HttpResponse, Request};

/// The one version of the protocol there is.
const VERSION: &str = "13";

/// Checks that `request` opens a WebSocket, and returns the
/// `Sec-WebSocket-Accept` value for it, or the answer it gets instead.
pub(super) fn accept_key(request: &Request) -> Result<String, HttpResponse> {
    if request.method() == Method::HEAD {
        // RFC 9110, 9.3.2: HEAD is answered as GET is, without the content.
        // A HEAD upgrades nothing (RFC 6455, 4.1: the handshake is a GET), so
        // it gets what a GET that asks for no upgrade gets.
        return Err(upgrade_required(NOT_A_HANDSHAKE));
    }
    if request.method() != Method::GET {
        // The route is a GET route, so the router refuses other methods
        // before they get here; `Allow` says what the router's 405 says.
        return Err(HttpResponse::text(
            "405 Method Not Allowed: a WebSocket handshake is a GET request",
        )
        .status(405)
        .header("Allow", "GET, HEAD"));
    }
    if request.version() < http::Version::HTTP_11 {
        // RFC 6455, 4.1: HTTP/1.1 or later; hyper upgrades no other.
        return Err(bad_request(
            "400 Bad Request: a WebSocket handshake needs HTTP/1.1 or later",
        ));
    }
    if !has_token(request, "upgrade", "websocket") {
        return Err(upgrade_required(NOT_A_HANDSHAKE));
    }
    if !has_token(request, "connection", "upgrade") {
        return Err(bad_request(
            "400 Bad Request: a WebSocket handshake needs the header Connection: Upgrade",
        ));
    }
    if announces_a_body(request) {
        // RFC 9110, 7.8: the upgraded protocol starts after the whole
        // request, so the body's bytes, arriving after the 101, would be
        // read as WebSocket frames.
        return Err(bad_request(
            "400 Bad Request: a WebSocket handshake has no body (no Transfer-Encoding, and no Content-Length but 0)",
        ));
    }
    if only_value(request, "sec-websocket-version") != Some(VERSION) {
        return Err(upgrade_required(
            "426 Upgrade Required: only WebSocket version 13 is supported (Sec-WebSocket-Version: 13)",
        ));
    }
    // RFC 6455, 11.3.1: the key appears once; two are a bad request (4.2.1).
    match only_value(request, "sec-websocket-key") {
        Some(key) if is_nonce(key) => Ok(derive_accept_key(key.as_bytes())),
        _ => Err(bad_request(
            "400 Bad Request: Sec-WebSocket-Key must be 16 random bytes in base64",
        )),
    }
}

/// What a request to a socket route that asks for no upgrade is told.
const NOT_A_HANDSHAKE: &str = "426 Upgrade Required: this route speaks WebSocket only; open it with a WebSocket handshake (Upgrade: websocket)";

/// Whether `request` says a body follows its head: any `Transfer-Encoding`,
/// or a `Content-Length` other than 0.
fn announces_a_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(http::header::TRANSFER_ENCODING)
        || headers
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .any(|length| {
                let length = length.to_str().ok().map(str::trim);
                length.and_then(|l| l.parse::<u64>().ok()) != Some(0)
            })
}

/// Whether a comma-separated header lists `token`, in any case.
fn has_token(request: &Request, header: &str, token: &str) -> bool {
    request.headers().get_all(header).iter().any(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|item| item.trim().eq_ignore_ascii_case(token))
        })
    })
}

/// The value of `header`, trimmed, when the request has exactly one.
fn only_value<'r>(request: &'r Request, header: &str) -> Option<&'r str> {
    let mut values = request.headers().get_all(header).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().map(str::trim),
        _ => None,
    }
}

/// 16 bytes in base64 are 22 symbols and `==`.
fn is_nonce(key: &str) -> bool {
    key.len() == 24
        && key.ends_with("==")
        && key[..22]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn upgrade_required(body: &str) -> HttpResponse {
    HttpResponse::text(body)
        .status(426)
        .header("Upgrade", "websocket")
        .header("Connection", "Upgrade")
        .header("Sec-WebSocket-Version", VERSION)
}

fn bad_request(body: &str) -> HttpResponse {
    HttpResponse::text(body).status(400)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake(set: &[(&'static str, &'static str)]) -> Request {
        let mut request = Request::new(
            http::Request::get("/ws")
                .header("Upgrade", "websocket")
                .header("Connection", "keep-alive, Upgrade")
                .header("Sec-WebSocket-Version", "13")
                .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
                .body(String::new())
                .unwrap(),
        );
        for (name, value) in set {
            request
                .headers_mut()
                .insert(*name, http::HeaderValue::from_static(value));
        }
        request
    }

    #[test]
    fn the_rfc_example_is_accepted() {
        // RFC 6455, section 1.3.
        assert_eq!(
            accept_key(&handshake(&[])).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn each_missing_part_is_named() {
        let plain = Request::new(http::Request::get("/ws").body(String::new()).unwrap());
        let r = accept_key(&plain).unwrap_err();
        assert_eq!(r.status_code(), 426);
        assert_eq!(r.header_str("upgrade"), Some("websocket"));

        let r = accept_key(&handshake(&[("sec-websocket-version", "8")])).unwrap_err();
        assert_eq!(r.status_code(), 426);
        assert_eq!(r.header_str("sec-websocket-version"), Some("13"));

        let no_key = handshake(&[("sec-websocket-key", "short")]);
        let r = accept_key(&no_key).unwrap_err();
        assert_eq!(r.status_code(), 400);
        assert!(r.body_text().contains("Sec-WebSocket-Key"));

        let old = Request::new(
            http::Request::get("/ws")
                .version(http::Version::HTTP_10)
                .body(String::new())
                .unwrap(),
        );
        let r = accept_key(&old).unwrap_err();
        assert_eq!(
            (r.status_code(), r.body_text()),
            (
                400,
                "400 Bad Request: a WebSocket handshake needs HTTP/1.1 or later".to_owned()
            )
        );

        let head = Request::new(
            http::Request::head("/ws")
                .header("Upgrade", "websocket")
                .body(String::new())
                .unwrap(),
        );
        let r = accept_key(&head).unwrap_err();
        assert_eq!(r.status_code(), 426);
        assert_eq!(r.header_str("upgrade"), Some("websocket"));

        let mut no_connection = handshake(&[]);
        no_connection.headers_mut().remove("connection");
        let r = accept_key(&no_connection).unwrap_err();
        assert_eq!(r.status_code(), 400);
        assert!(r.body_text().contains("Connection: Upgrade"));
    }

    #[test]
    fn a_handshake_that_announces_a_body_is_refused() {
        for (name, value) in [
            ("content-length", "8"),
            ("content-length", "nine"),
            ("transfer-encoding", "chunked"),
        ] {
            let mut request = handshake(&[]);
            request
                .headers_mut()
                .insert(name, http::HeaderValue::from_static(value));
            let r = accept_key(&request).unwrap_err();
            assert_eq!(r.status_code(), 400, "{name}: {value}");
            assert!(r.body_text().contains("has no body"), "{}", r.body_text());
        }
        // An empty body, announced, is no body.
        assert!(accept_key(&handshake(&[("content-length", "0")])).is_ok());
    }
}
