//! Bucket keys named by the account a request acts on: the mailbox of a
//! password reset, the phone number of an SMS code.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::ops::ControlFlow;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use unicode_normalization::UnicodeNormalization;

use super::address_key::address_key;
use crate::Request;
use crate::keys::{percent_decoded, sha256_hex};

/// The bucket key of the identity a request names in `field`.
///
/// The field is read from the query string and, when
/// [`RateLimitMiddleware::key_reads_body`](super::RateLimitMiddleware::key_reads_body)
/// has buffered the body, from the body by every reading a handler may make
/// of it: as a form, as a JSON object (its top-level string fields), and as
/// multipart form data split by the boundary of its `Content-Type` and by
/// the one its first line opens with, whatever the label says. The parts
/// are read as RFC 2046 and RFC 7578 write them and as multer (the parser
/// under axum's `Multipart`) reads them, every reading counting: from the
/// first boundary at the body's start or after a line break, and from the
/// first `--<boundary>` anywhere; a part's headers up to their blank line
/// (a line among them that opens with `--<boundary>` included) and its
/// value up to the next `\r\n--<boundary>` after them; a part named
/// `field` by its parameters or by multer's reading of its
/// `Content-Disposition` (`name=email x`); and its value as UTF-8 and as
/// `Field::text()` decodes it, by the `charset` of the part's
/// `Content-Type` and a byte order mark. Each value is
/// trimmed (whitespace, and what Laravel's `TrimStrings` trims besides: a
/// byte order mark, U+200B and U+200E), put in Unicode normal form C,
/// case-folded and put in normal form C again, an address's domain written
/// in ASCII as IDNA writes it, so `Alice@Example.com` and
/// ` alice@example.com ` share a bucket, and so do `josé` written with a
/// precomposed `é` and with `e` and a combining accent, `ǰoe` and its
/// capitals `J̌OE`, `straße` and `STRASSE`, and `bücher.example` and
/// `xn--bcher-kva.example`; and it is hashed with SHA-256, so a dump of the
/// limiter's keys does not read as a list of who is resetting a password.
///
/// - One identity: `<namespace>:id:<sha256 of the normalised value>`.
/// - None (no value, or only blank ones): the address key
///   `<namespace>:ip:<bucket address>`; pair the middleware with
///   [`names_identity`] in `only_when` to skip such requests instead.
/// - Two different identities (say `?email=` names one and the body
///   another): the handler reads one of them and the key cannot know which,
///   so every such request shares `<namespace>:ambiguous`. Inside a
///   [`RateLimitMiddleware`](super::RateLimitMiddleware) key function the
///   request is also refused by, and counted against, the bucket of each
///   identity it names, so a decoy cannot buy a fresh quota and a spent
///   identity gets no extra attempt through the shared bucket. Each bucket
///   that admits the request counts it, even when another one refuses it.
/// - More than two different identities: the key is `<namespace>:ambiguous`
///   too, but inside a [`RateLimitMiddleware`](super::RateLimitMiddleware)
///   key function the request is refused with `429` (`Retry-After` the
///   whole window, `X-RateLimit-Reset` its end) and counted against no
///   bucket, the backend not asked.
///   Counting it against each mailbox it names would let one host, well
///   inside its own per-address budget, spend the budgets of hundreds of
///   mailboxes with one request (and make a round trip for each); counting
///   it nowhere and never admitting it means no mailbox is charged, and a
///   spent one gets no attempt through it. No legitimate client names three
///   mailboxes in one request.
///
/// A blank value in one place does not hide the value in the other.
///
/// ```
/// use suprnova::Request;
/// use suprnova::keys::sha256_hex;
/// use suprnova::rate_limit::identity_key;
///
/// let req = Request::new(
///     http::Request::post("/password/reset?email=%20Alice@Example.com").body(String::new()).unwrap(),
/// );
/// assert_eq!(
///     identity_key(&req, "email", "auth-issuance"),
///     format!("auth-issuance:id:{}", sha256_hex("alice@example.com")),
/// );
/// ```
pub fn identity_key(req: &Request, field: &str, namespace: &str) -> String {
    let named = identities(req, field);
    match named.len() {
        0 => address_key(req, &format!("{namespace}:ip")),
        1 => id_key(namespace, named.first().map_or("", String::as_str)),
        2 => {
            let each: Vec<String> = named.iter().map(|v| id_key(namespace, v)).collect();
            report_named_buckets(each);
            format!("{namespace}:ambiguous")
        }
        _ => {
            report_too_many_named();
            format!("{namespace}:ambiguous")
        }
    }
}

/// Whether the request names a non-blank identity in `field`, in the query
/// string or in a body buffered by
/// [`key_reads_body`](super::RateLimitMiddleware::key_reads_body).
///
/// Use it in [`only_when`](super::RateLimitMiddleware::only_when) so that
/// requests naming nobody skip a per-recipient limit instead of falling into
/// [`identity_key`]'s address fallback and spending its (usually tight)
/// quota.
///
/// ```
/// use suprnova::Request;
/// use suprnova::rate_limit::names_identity;
///
/// let named = Request::new(http::Request::get("/r?email=a@b.c").body(String::new()).unwrap());
/// let blank = Request::new(http::Request::get("/r?email=%20").body(String::new()).unwrap());
/// assert!(names_identity(&named, "email"));
/// assert!(!names_identity(&blank, "email"));
/// ```
pub fn names_identity(req: &Request, field: &str) -> bool {
    !identities(req, field).is_empty()
}

fn id_key(namespace: &str, normalised: &str) -> String {
    format!("{namespace}:id:{}", sha256_hex(normalised))
}

/// Enough distinct identities to decide a key: with three, more change
/// nothing ([`identity_key`] counts the request in no bucket).
const ENOUGH_IDENTITIES: usize = 3;

/// Every distinct, normalised, non-blank value of `field`, from the query
/// string and the buffered body, up to [`ENOUGH_IDENTITIES`]: the readings
/// stop once that many are found, so a body built to be read many ways
/// costs no more than the identities it can name.
fn identities(req: &Request, field: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut add = |value: String| {
        let value = normalised(&value);
        if !value.is_empty() {
            found.insert(value);
        }
        if found.len() >= ENOUGH_IDENTITIES {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let query = req.query_params(field).into_iter().try_for_each(&mut add);
    if query.is_continue()
        && let Some(body) = req.buffered_body()
    {
        // Stopped or not, what was found is the answer.
        let _ = body_values(body, req.header("content-type"), field, &mut add);
    }
    found
}

/// Where the values a reading finds go, one at a time: `Break` when no more
/// are needed.
type Sink<'s> = dyn FnMut(String) -> ControlFlow<()> + 's;

/// A value as its bucket knows it: trimmed as Laravel's `TrimStrings`
/// trims it, put in Unicode normal form C, case-folded (uppercased, then
/// lowercased), and put in normal form C again; an address's domain, when
/// it is not ASCII, is written instead as IDNA writes it in ASCII.
///
/// Canonically equivalent spellings reach one mailbox, so they must share
/// a bucket. Normal form C comes first, so folding acts on one spelling of
/// each equivalence class; and again after, since folding can leave text
/// that is not in it: `ǰ` (U+01F0) has no capital of its own, its
/// uppercase is `J` and a combining caron, which lowercase to `j` and the
/// caron, and those compose to `ǰ`. Lowercasing alone is not folding:
/// `straße` and `STRASSE`, `οδοσ` and `ΟΔΟΣ`, `ılgın` and `ILGIN` are one
/// name each to a database's case-insensitive collation, and reach one
/// mailbox, so each pair shares a bucket. A domain's Unicode and Punycode
/// spellings (`bücher.example`, `xn--bcher-kva.example`) are one domain;
/// IDNA maps its case itself, and keeps `straße.de` apart from
/// `strasse.de`.
fn normalised(value: &str) -> String {
    let value: String = laravel_trimmed(value).nfc().collect();
    // The domain as IDNA reads it, before any folding: folded first,
    // `straße.de` would become `strasse.de`, another domain, and never meet
    // its own Punycode spelling (`xn--strae-oqa.de`).
    if let Some((local, domain)) = value.rsplit_once('@')
        && !domain.is_ascii()
        && let Ok(domain) = idna::domain_to_ascii_cow(domain.as_bytes(), idna::AsciiDenyList::EMPTY)
    {
        return format!("{}@{domain}", case_folded(local));
    }
    case_folded(&value)
}

/// `text`, in normal form C, uppercased, then lowercased, and put in normal
/// form C again.
fn case_folded(text: &str) -> String {
    text.to_uppercase().to_lowercase().nfc().collect()
}

/// `value` without what Laravel's `TrimStrings` middleware trims from
/// either end: whitespace, and U+FEFF (a byte order mark), U+200B (zero
/// width space) and U+200E (left-to-right mark)
/// (`preg_replace('~^[\s\x{FEFF}\x{200B}\x{200E}]+|[\s\x{FEFF}\x{200B}\x{200E}]+$~u', '', $value)`),
/// and NUL, which `Str::trim` adds to the class since Laravel 11. PCRE's
/// `\s` with `/u` takes U+180E (Mongolian vowel separator) as a horizontal
/// space, where Unicode's whitespace no longer has it.
/// A handler ported from Laravel reads the value so trimmed, so it must
/// share the bucket of the value written without them.
fn laravel_trimmed(value: &str) -> &str {
    value.trim_matches(|c: char| {
        c.is_whitespace() || matches!(c, '\u{FEFF}' | '\u{200B}' | '\u{200E}' | '\u{180E}' | '\0')
    })
}

/// The values of `field` in a body, by every reading a handler may make of
/// it: as a form, as a JSON object, and as multipart form data split by the
/// boundary its `Content-Type` gives and by the one its first line opens
/// with, each split read by every parser's reading ([`multipart_values`]).
/// A handler may parse the body any of these ways (many read a form
/// without looking at the label), so no label, and no body built to read
/// one way as well as another, takes the identity out of the count: a form
/// that is also a JSON object (`{"x":"&email=victim&"}`) or opens like a
/// multipart boundary (`--x\r\n&email=victim`) names the mailbox its form
/// names. Values that differ between readings are two identities.
///
/// Each value goes to `sink` as it is found; a part that several splits or
/// openings find is read once.
fn body_values(
    body: &[u8],
    content_type: Option<&str>,
    field: &str,
    sink: &mut Sink<'_>,
) -> ControlFlow<()> {
    if body.is_empty() {
        return ControlFlow::Continue(());
    }
    let json = json_values(body, field);
    form_values(body, field, json.is_some())
        .into_iter()
        .chain(json.unwrap_or_default())
        .try_for_each(&mut *sink)?;
    let mut boundaries = content_type.map(labelled_boundaries).unwrap_or_default();
    if let Some(opened) = first_line_boundary(body)
        && !boundaries.iter().any(|b| b == opened)
    {
        boundaries.push(opened.to_vec());
    }
    let mut read = HashSet::new();
    for boundary in &boundaries {
        multipart_values(body, boundary, field, &mut read, sink)?;
    }
    ControlFlow::Continue(())
}

/// The boundaries a `multipart/*` `Content-Type` gives, read as a parser
/// reads an HTTP parameter value: a token, or a quoted-string whose quotes
/// (and the `;` inside them) are honoured. Any non-empty value counts, not
/// only one RFC 2046 allows in a body (`x!y`, `50%`, 71 characters): parsers
/// accept those from the label and split the body by them, so a strict
/// check here would let such a label hide the mailbox. The body cap bounds
/// the work of each split.
///
/// Parsers differ at the edges, so each reading one may make is tried: the
/// first `boundary` parameter and the last, and a quoted value with its
/// backslash escapes undone (RFC 9110) and as written; and the reading of
/// a parser that takes a quoted value up to the next quote, a backslash
/// and all (the `mime` crate's, which multer and axum's `Multipart` use:
/// `boundary="a\"; charset=utf-8` is `a\` to it, where RFC 9110 reads the
/// rest of the header as the value); and RFC 2231's extended form
/// (`boundary*=utf-8''a%21b`, or numbered parts), which Go's and Python's
/// parsers read.
fn labelled_boundaries(content_type: &str) -> Vec<Vec<u8>> {
    if !is_multipart(content_type.split(';').next()) {
        return Vec::new();
    }
    // RFC 9110: quoted-strings honoured, escapes undone and as written.
    let quoted: Vec<&str> = parameters(content_type)
        .skip(1)
        .filter_map(|param| parameter(param, "boundary"))
        .collect();
    // The `mime` crate's: split at each `;`, a quoted value up to its next
    // quote.
    let up_to_quote: Vec<&str> = content_type
        .split(';')
        .skip(1)
        .filter_map(up_to_next_quote)
        .collect();
    let mut candidates = Vec::new();
    for value in first_and_last(&quoted) {
        candidates.push(unescaped(value));
        candidates.push(value.as_bytes().to_vec());
    }
    for value in first_and_last(&up_to_quote) {
        candidates.push(value.as_bytes().to_vec());
    }
    candidates.extend(extended_boundary(content_type));
    let mut boundaries: Vec<Vec<u8>> = Vec::new();
    for candidate in candidates {
        if !candidate.is_empty() && !boundaries.contains(&candidate) {
            boundaries.push(candidate);
        }
    }
    boundaries
}

/// The first of `values` and the last: where parsers differ on a repeated
/// parameter, one takes the first and another the last.
fn first_and_last<'a>(values: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
    values.first().into_iter().chain(values.last()).copied()
}

/// Whether a `Content-Type`'s media type is `multipart/*`.
fn is_multipart(kind: Option<&str>) -> bool {
    kind.and_then(|kind| kind.trim().get(..10))
        .is_some_and(|kind| kind.eq_ignore_ascii_case("multipart/"))
}

/// The value of a `boundary` parameter as the `mime` crate reads it: a
/// value that opens with a quote ends at the first quote that is not its
/// first character (`""x"` is `"x`), and one with no such quote is no value;
/// no escape is undone.
fn up_to_next_quote(param: &str) -> Option<&str> {
    let (key, value) = param.split_once('=')?;
    if !key.trim().eq_ignore_ascii_case("boundary") {
        return None;
    }
    let value = value.trim();
    Some(match value.strip_prefix('"') {
        Some(quoted) => {
            let (end, _) = quoted.char_indices().skip(1).find(|&(_, c)| c == '"')?;
            &quoted[..end]
        }
        None => value,
    })
}

/// The boundary given in RFC 2231's extended form, as Go's `mime` and
/// Python's `email` read it: `boundary*=utf-8''a%21b` (a charset and a
/// language, then the value percent-encoded), or split in numbered parts
/// (`boundary*0=x; boundary*1*=%21`), joined in their order.
fn extended_boundary(content_type: &str) -> Option<Vec<u8>> {
    let decoded = |text: &str| {
        percent_decoded(text, false)
            .map_or_else(|| text.as_bytes().to_vec(), |t| t.into_owned().into_bytes())
    };
    // `charset'language'value`: the value.
    let after_charset = |value: &str| value.splitn(3, '\'').nth(2).map(str::to_owned);
    let mut whole = None;
    let mut parts: Vec<(u32, Vec<u8>)> = Vec::new();
    for param in content_type.split(';').skip(1) {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let Some(rest) = name.strip_prefix("boundary*") else {
            continue;
        };
        let value = value.trim();
        if rest.is_empty() {
            whole = after_charset(value).map(|v| decoded(&v));
            continue;
        }
        let (number, encoded) = match rest.strip_suffix('*') {
            Some(number) => (number, true),
            None => (rest, false),
        };
        let Ok(number) = number.parse::<u32>() else {
            continue;
        };
        let part = match (encoded, number) {
            (true, 0) => after_charset(value)
                .map(|v| decoded(&v))
                .unwrap_or_default(),
            (true, _) => decoded(value),
            (false, _) => value.trim_matches('"').as_bytes().to_vec(),
        };
        parts.push((number, part));
    }
    if whole.is_some() {
        return whole.filter(|boundary| !boundary.is_empty());
    }
    parts.sort_by_key(|&(number, _)| number);
    let joined: Vec<u8> = parts.into_iter().flat_map(|(_, part)| part).collect();
    (!joined.is_empty()).then_some(joined)
}

/// The `;`-separated parts of a header value, a `;` inside a quoted-string
/// (`boundary="a;b"`) being part of the value and not a separator.
fn parameters(header: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(header);
    std::iter::from_fn(move || {
        let text = rest?;
        let (mut quoted, mut escaped) = (false, false);
        let end = text.bytes().position(|b| {
            match b {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                b';' if !quoted => return true,
                _ => {}
            }
            false
        });
        match end {
            Some(at) => {
                rest = Some(&text[at + 1..]);
                Some(&text[..at])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

/// A quoted-string's content with each `\x` read as `x`.
fn unescaped(quoted: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(quoted.len());
    let mut bytes = quoted.bytes();
    while let Some(b) = bytes.next() {
        out.push(if b == b'\\' {
            bytes.next().unwrap_or(b)
        } else {
            b
        });
    }
    out
}

/// The boundary of a body whose first line is `--<boundary>`: with no label
/// to go by, only a line that holds a boundary RFC 2046 allows.
fn first_line_boundary(body: &[u8]) -> Option<&[u8]> {
    let first_line_ends = find(body, b"\r\n")?;
    body[..first_line_ends]
        .strip_prefix(b"--")
        .filter(|b| is_boundary(b))
}

/// Whether `boundary` is one RFC 2046 allows: 1 to 70 of its characters.
fn is_boundary(boundary: &[u8]) -> bool {
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(b);
    !boundary.is_empty() && boundary.len() <= 70 && boundary.iter().all(allowed)
}

/// The value of the header parameter `param` (`name="email"`, `name=email`)
/// when `param` is `name`, its case ignored.
fn parameter<'a>(param: &'a str, name: &str) -> Option<&'a str> {
    let (key, value) = param.split_once('=')?;
    if !key.trim().eq_ignore_ascii_case(name) {
        return None;
    }
    let value = value.trim();
    Some(
        value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value),
    )
}

/// The values of the parts named `field` of a multipart body split by
/// `boundary`, after any preamble: every such part, a file part included,
/// since a handler reads a part by its name. The parts are read from each
/// place a parser may take the body to open ([`openings`]), the values of
/// every reading counted.
///
/// `read` holds the parts already read (their place and length in
/// `body`), by this split or another.
fn multipart_values(
    body: &[u8],
    boundary: &[u8],
    field: &str,
    read: &mut HashSet<(usize, usize)>,
    sink: &mut Sink<'_>,
) -> ControlFlow<()> {
    let mut delimiter = b"\r\n--".to_vec();
    delimiter.extend_from_slice(boundary);
    for opened in openings(body, &delimiter) {
        parts_values(body, opened, &delimiter, field, read, sink)?;
    }
    ControlFlow::Continue(())
}

/// Where the first `--<boundary>` of a body may be taken to stand, given
/// the `delimiter` `\r\n--<boundary>`: RFC 2046's reading, at the body's
/// start or after the CRLF that ends a preamble; and multer's, the first
/// `--<boundary>` anywhere (its `FindingFirstBoundary` reads up to it), a
/// preamble with no line break before it (`x--b`) included.
fn openings(body: &[u8], delimiter: &[u8]) -> Vec<usize> {
    let dash_boundary = &delimiter[2..];
    let after_line_break = if body.starts_with(dash_boundary) {
        Some(0)
    } else {
        find(body, delimiter).map(|at| at + 2)
    };
    let anywhere = find(body, dash_boundary);
    let mut at: Vec<usize> = after_line_break.into_iter().chain(anywhere).collect();
    at.dedup();
    at
}

/// The values of the parts named `field` of `body` from `opened`, where it
/// opens with its first `--<boundary>` line, each part read as multer and
/// RFC 2046 read it: its headers up to the first blank line, whatever lines
/// they hold (one that opens with `--<boundary>` is a header like any
/// other), then its value up to the next `delimiter` (`\r\n--<boundary>`),
/// looked for only after the headers, so a value that opens with
/// `--<boundary>` is read whole. After the delimiter comes `--` (the close
/// delimiter, the last part) or spaces and tabs and a CRLF before the next
/// part; anything else after it is read as the next part as well. A part
/// is named `field` when its `Content-Disposition` names it by any
/// reading: its parameters as RFC 7578 writes them ([`parameter`]), or
/// multer's ([`multer_name`]). Each value is read as text by each reading a
/// handler may make of it ([`part_texts`]), unless `read` shows the part
/// read already.
fn parts_values(
    body: &[u8],
    opened: usize,
    delimiter: &[u8],
    field: &str,
    read: &mut HashSet<(usize, usize)>,
    sink: &mut Sink<'_>,
) -> ControlFlow<()> {
    let from = &body[opened..];
    let Some(mut rest) = find(from, b"\r\n").map(|end| &from[end + 2..]) else {
        return ControlFlow::Continue(());
    };
    // Each pass reads one part, from its headers to the delimiter after
    // its value, so the body is scanned once.
    while let Some(headers_end) = find(rest, b"\r\n\r\n") {
        let value = &rest[headers_end + 4..];
        let value_ends = find(value, delimiter).unwrap_or(value.len());
        let headers = String::from_utf8_lossy(&rest[..headers_end]);
        let named = part_headers(&headers, "content-disposition").any(|disposition| {
            disposition
                .split(';')
                .filter_map(|param| parameter(param, "name"))
                .any(|name| name == field)
                || multer_name(disposition).is_some_and(|name| name == field)
        });
        // The part's place in the body: the same part found by another
        // split or opening is not read again.
        let place = (body.len() - rest.len(), headers_end + 4 + value_ends);
        if named && read.insert(place) {
            part_texts(&headers, &value[..value_ends])
                .into_iter()
                .try_for_each(&mut *sink)?;
        }
        let Some(after) = value.get(value_ends + delimiter.len()..) else {
            break;
        };
        if after.starts_with(b"--") {
            break;
        }
        let padding = after
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        rest = &after[padding..];
        rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
    }
    ControlFlow::Continue(())
}

/// The values of every header `name` (its case ignored) of a part's
/// `headers`, one a line.
fn part_headers<'h>(headers: &'h str, name: &str) -> impl Iterator<Item = &'h str> {
    headers.lines().filter_map(move |line| {
        let (header, value) = line.split_once(':')?;
        header.trim().eq_ignore_ascii_case(name).then_some(value)
    })
}

/// The name multer (3.1, `ContentDispositionAttr::extract_from`) reads from
/// a `Content-Disposition` value: at the first `name` (its case kept) at
/// the start or after a blank or a `;`, so one inside another parameter's
/// quotes counts (`filename="a name=email;"`) and `filename` does not;
/// then `=` with blanks around it, and a quoted value up to the next quote
/// not preceded by a backslash (each `\"` read as `"`), or an unquoted one
/// up to the next `;` or space (`name=email x` and `name="email"x` are
/// `email`). `None` when that `name` has no `=` after it, a quoted value no
/// end, or the value is not UTF-8.
fn multer_name(disposition: &str) -> Option<String> {
    let mut header = disposition.as_bytes().trim_ascii();
    while let Some(at) = find(header, b"name") {
        let after = &header[at + 4..];
        if at > 0 && !(header[at - 1].is_ascii_whitespace() || header[at - 1] == b';') {
            header = after;
            continue;
        }
        let rest = after.trim_ascii_start().strip_prefix(b"=")?;
        let rest = rest.trim_ascii_start();
        let (name, escaped) = match rest.strip_prefix(b"\"") {
            Some(quoted) => {
                let mut end = memchr::memchr(b'"', quoted)?;
                let mut escaped = false;
                while end > 0 && quoted[end - 1] == b'\\' {
                    escaped = true;
                    end += 1 + memchr::memchr(b'"', &quoted[end + 1..])?;
                }
                (&quoted[..end], escaped)
            }
            None => {
                let end = memchr::memchr2(b';', b' ', rest).unwrap_or(rest.len());
                (&rest[..end], false)
            }
        };
        let name = std::str::from_utf8(name).ok()?;
        return Some(if escaped {
            name.replace("\\\"", "\"")
        } else {
            name.to_owned()
        });
    }
    None
}

/// A part's value as text, by each reading a handler may make of it: its
/// bytes as UTF-8, invalid sequences replaced; and as multer's
/// `Field::text()` decodes it, by the `charset` parameter of the part's own
/// `Content-Type` (a label `encoding_rs` knows, UTF-8 when there is none or
/// it knows none), a byte order mark overriding it. The first and the last
/// `charset` the part's `Content-Type` lines give are tried (a parser
/// takes one `Content-Type` and one `charset`, the first or the last), and
/// UTF-8 with its byte order mark read too, for a parser that finds no
/// charset it takes: at most four texts, however many a part lists. The
/// same text read twice is one value; two texts are two identities.
fn part_texts(headers: &str, value: &[u8]) -> Vec<String> {
    let mut charsets = part_headers(headers, "content-type").flat_map(|content_type| {
        parameters(content_type)
            .skip(1)
            .filter_map(|param| parameter(param, "charset"))
    });
    let first = charsets.next();
    let last = charsets.last();
    let mut encodings = vec![encoding_rs::UTF_8];
    for charset in first.into_iter().chain(last) {
        let encoding =
            encoding_rs::Encoding::for_label(charset.as_bytes()).unwrap_or(encoding_rs::UTF_8);
        if !encodings.contains(&encoding) {
            encodings.push(encoding);
        }
    }
    let mut texts = vec![String::from_utf8_lossy(value).into_owned()];
    for encoding in encodings {
        let (text, _, _) = encoding.decode(value);
        if !texts.iter().any(|t| *t == text) {
            texts.push(text.into_owned());
        }
    }
    texts
}

/// Where `needle` first starts in `haystack`, in time linear in both: a
/// labelled boundary may be as long as the header allows.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// The values of `field` in `body` read as a form.
///
/// When the body is also a JSON object, a pair that holds a raw `"` is not
/// read. Outside its strings a JSON object holds no `&`, so each pair but
/// the first starts inside a string: a pair with no `"` lies wholly inside
/// one, and is read (`{"x":"&email=victim&"}` must still name the victim,
/// since a handler may read that body as a form), while a pair with a raw
/// `"` runs out of its string into JSON syntax, as the tail of a URL in a
/// string value does (`"/welcome?email=alice%40mail.test"}` gives
/// `alice@mail.test"}`), or holds an escaped `\"`. A form encoder writes
/// `"` as `%22`, so such a value is JSON text, not an address a handler
/// would send to, and reading it would make a plain JSON request
/// ambiguous. Not reading a JSON body as a form at all would let the label
/// hide the field; in a body that is not JSON a raw `"` may be part of an
/// address (`"victim"@mail.test`), so it is read there.
fn form_values(body: &[u8], field: &str, json_object: bool) -> Vec<String> {
    body.split(|&b| b == b'&')
        .filter(|pair| !(json_object && pair.contains(&b'"')))
        .flat_map(form_urlencoded::parse)
        .filter(|(k, _)| k == field)
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// The string values of `field` at the top level of a JSON object, every one
/// of them when the object repeats the field (a parser that keeps the last
/// and one that keeps the first must both be covered). `None` when the body
/// is not a JSON object.
fn json_values(body: &[u8], field: &str) -> Option<Vec<String>> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let values = FieldValues(field).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(values)
}

struct FieldValues<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for FieldValues<'_> {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldValues<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                // A number or an object is not an identity: only a string is.
                if let serde_json::Value::String(s) = map.next_value::<serde_json::Value>()? {
                    found.push(s);
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// What [`identity_key`] reported while a middleware's key function ran.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Named {
    /// The bucket of each identity an ambiguous request names.
    pub(crate) buckets: Vec<String>,
    /// The request names more than two identities: refuse it, counting it
    /// nowhere.
    pub(crate) too_many: bool,
}

thread_local! {
    /// Where [`identity_key`] reports the buckets of an ambiguous request
    /// while a middleware computes its key on this thread.
    static NAMED_BUCKETS: RefCell<Option<Named>> = const { RefCell::new(None) };
}

fn report_named_buckets(keys: Vec<String>) {
    NAMED_BUCKETS.with(|sink| {
        if let Some(sink) = sink.borrow_mut().as_mut() {
            sink.buckets.extend(keys);
        }
    });
}

fn report_too_many_named() {
    NAMED_BUCKETS.with(|sink| {
        if let Some(sink) = sink.borrow_mut().as_mut() {
            sink.too_many = true;
        }
    });
}

/// Runs a key function and returns its key with what [`identity_key`]
/// reported while it ran: the extra buckets it named, and whether a request
/// named too many identities to be admitted.
///
/// Key functions are synchronous, so a thread-local sink set around the
/// call sees exactly the calls made by this one.
pub(crate) fn with_named_buckets<R>(key_fn: impl FnOnce() -> R) -> (R, Named) {
    struct Restore(Option<Option<Named>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            // Runs on unwind too, so a panicking key function leaves no sink
            // behind on the thread.
            let previous = self.0.take().flatten();
            NAMED_BUCKETS.with(|sink| *sink.borrow_mut() = previous);
        }
    }
    let previous = NAMED_BUCKETS.with(|sink| sink.borrow_mut().replace(Named::default()));
    let restore = Restore(Some(previous));
    let key = key_fn();
    let named = NAMED_BUCKETS
        .with(|sink| sink.borrow_mut().take())
        .unwrap_or_default();
    drop(restore);
    (key, named)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of `field` in `body`, sorted, with no label.
    fn read(body: &[u8], field: &str) -> Vec<String> {
        labelled(body, None, field)
    }

    fn labelled(body: &[u8], content_type: Option<&str>, field: &str) -> Vec<String> {
        let mut values = every_value(body, content_type, field);
        values.sort();
        values
    }

    /// Every value the readings of `body` find, in their order.
    fn every_value(body: &[u8], content_type: Option<&str>, field: &str) -> Vec<String> {
        let mut values = Vec::new();
        let _ = body_values(body, content_type, field, &mut |value| {
            values.push(value);
            ControlFlow::Continue(())
        });
        values
    }

    #[test]
    fn trimmed_as_trim_strings_trims() {
        for padded in [
            " a@b.c\t\n",
            "\u{FEFF}a@b.c\u{200B}",
            "\u{200E}a@b.c\u{180E}",
            "\0a@b.c\0",
            "\u{3000}\u{180E} a@b.c",
        ] {
            assert_eq!(laravel_trimmed(padded), "a@b.c", "{padded:?}");
        }
        // Only the ends.
        assert_eq!(laravel_trimmed("a\0b\u{180E}c"), "a\0b\u{180E}c");
    }

    #[test]
    fn form_and_json_bodies_are_read_whatever_their_label() {
        assert_eq!(read(b"a=1&email=x%40y.z", "email"), vec!["x@y.z"]);
        assert_eq!(
            read(br#"{"email":"x@y.z","n":{"email":"inner"}}"#, "email"),
            vec!["x@y.z"]
        );
        assert_eq!(read(b"email=q", "email"), vec!["q"]);
        assert_eq!(
            labelled(b"email=q", Some("application/json"), "email"),
            vec!["q"]
        );
    }

    #[test]
    fn a_body_built_to_read_two_ways_names_what_each_reading_finds() {
        // A JSON object whose form reading names the victim.
        assert_eq!(
            read(br#"{"x":"&email=victim%40example.com&"}"#, "email"),
            vec!["victim@example.com"]
        );
        // A form whose first line opens like a multipart boundary.
        assert_eq!(
            read(b"--x\r\n&email=victim%40example.com", "email"),
            vec!["victim@example.com"]
        );
        // A JSON object that names one mailbox and a form reading another:
        // two identities.
        assert_eq!(
            read(br#"{"email":"a@x","n":"&email=b@x&"}"#, "email"),
            vec!["a@x", "b@x"]
        );
    }

    #[test]
    fn a_form_pair_running_into_json_syntax_is_not_a_name() {
        // The tail of a URL in a JSON string: `b@x"}` is not read.
        assert_eq!(
            read(br#"{"email":"a@x","to":"/w?email=b%40x"}"#, "email"),
            vec!["a@x"]
        );
        assert!(read(br#"{"to":"/w?email=b%40x"q"}"#, "email").is_empty());
        // A body that is not JSON keeps a raw quote in its form values.
        assert_eq!(
            read(br#"email="victim"@mail.test"#, "email"),
            vec![r#""victim"@mail.test"#]
        );
        assert_eq!(
            read(br#"{"email":"a@x"&email="b"@x"#, "email"),
            vec![r#""b"@x"#]
        );
    }

    const MULTIPART: &[u8] = b"--XyZ\r\n\
Content-Disposition: form-data; name=\"note\"\r\n\r\n\
hello\r\n\
--XyZ\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\n\
Ada@Example.com\r\n\
--XyZ\r\n\
Content-Disposition: form-data; name=\"avatar\"; filename=\"email\"\r\n\
Content-Type: text/plain\r\n\r\n\
a file\r\n\
--XyZ--\r\n";

    #[test]
    fn multipart_parts_are_read_by_name_whatever_the_label() {
        assert_eq!(read(MULTIPART, "email"), vec!["Ada@Example.com"]);
        assert_eq!(read(MULTIPART, "note"), vec!["hello"]);
        assert_eq!(read(MULTIPART, "avatar"), vec!["a file"]);
        assert!(read(MULTIPART, "password").is_empty());
        assert_eq!(
            labelled(
                MULTIPART,
                Some("multipart/form-data; boundary=XyZ"),
                "email"
            ),
            vec!["Ada@Example.com"]
        );
        // A form whose first field starts with dashes is still a form.
        assert_eq!(read(b"--x=1&email=q", "email"), vec!["q"]);
    }

    #[test]
    fn a_part_named_without_quotes_or_holding_a_file_counts() {
        let body = b"--b\r\n\
content-disposition: form-data; name=email\r\n\r\n\
a@x\r\n\
--b\r\n\
Content-Disposition: form-data; name=\"email\"; filename=\"e.txt\"\r\n\r\n\
b@x\r\n\
--b--\r\n";
        assert_eq!(read(body, "email"), vec!["a@x", "b@x"]);
    }

    #[test]
    fn the_labelled_boundary_is_read_after_a_preamble_that_opens_like_another() {
        // A parser splits by the boundary the header gives, after any
        // preamble; this body's first line opens like a boundary of its own.
        let body = b"--decoy\r\n\
preamble\r\n\
--real\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\n\
victim@example.com\r\n\
--real--\r\n";
        let victim = "victim@example.com".to_owned();
        assert!(!read(body, "email").contains(&victim));
        for content_type in [
            "multipart/form-data; boundary=real",
            "Multipart/Form-Data; charset=utf-8; BOUNDARY=\"real\"",
        ] {
            let found = labelled(body, Some(content_type), "email");
            assert!(found.contains(&victim), "{content_type}: {found:?}");
        }
        let found = labelled(body, Some("text/plain; boundary=real"), "email");
        assert!(!found.contains(&victim), "{found:?}");
    }

    #[test]
    fn the_labelled_boundary_is_read_as_an_http_parameter_value() {
        assert_eq!(
            labelled_boundaries("multipart/form-data; boundary=x!y~%"),
            vec![b"x!y~%".to_vec()]
        );
        // A `;` inside quotes is part of the value, and a `boundary=` inside
        // another parameter's quotes is not a parameter.
        // (Read with no regard for quotes, as a naive parser would, the
        // decoy is tried too; `"a` ends at no quote, and is no value.)
        assert_eq!(
            labelled_boundaries(r#"multipart/form-data; note="; boundary=decoy"; boundary="a;b""#),
            vec![b"a;b".to_vec(), b"decoy\"".to_vec()]
        );
        // Escapes undone and as written, and up to the next quote; the
        // first repeat and the last.
        assert_eq!(
            labelled_boundaries(r#"multipart/mixed; boundary="q\"t""#),
            vec![b"q\"t".to_vec(), b"q\\\"t".to_vec(), b"q\\".to_vec()]
        );
        assert_eq!(
            labelled_boundaries("multipart/form-data; boundary=one; boundary=two; boundary=three"),
            vec![b"one".to_vec(), b"three".to_vec()]
        );
        assert!(labelled_boundaries("multipart/form-data; boundary=\"\"").is_empty());
        // The `mime` crate's reading (multer's, axum's): a quoted value ends
        // at the next quote, the backslash kept, so the boundary is `a\`.
        let label = r#"multipart/form-data; boundary="a\"; charset=utf-8"#;
        assert!(labelled_boundaries(label).contains(&b"a\\".to_vec()));
        let body = b"--a\\\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nvictim@mail.test\r\n--a\\--\r\n";
        assert_eq!(
            every_value(body, Some(label), "email"),
            vec!["victim@mail.test"]
        );
        assert!(labelled_boundaries("text/plain; boundary=x").is_empty());
    }

    #[test]
    fn every_parser_s_reading_of_a_label_finds_the_mailbox() {
        // Each label with the body a parser that reads it that way splits
        // by its boundary: the `mime` crate's `""x"` is `"x`; RFC 2231's
        // extended form (Go's and Python's parsers) is `a!b`, and its
        // numbered parts `xy`, the second body opening with a preamble.
        let part = |boundary: &str, preamble: &str| {
            format!(
                "{preamble}--{boundary}\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\n\
                 victim@mail.test\r\n--{boundary}--\r\n"
            )
        };
        for (label, body) in [
            (
                r#"multipart/form-data; boundary=""x"; charset=utf-8"#,
                part("\"x", ""),
            ),
            (
                "multipart/form-data; boundary*=utf-8''a%21b",
                part("a!b", ""),
            ),
            (
                "multipart/form-data; boundary*0=x; boundary*1=y",
                part("xy", "preamble\r\n"),
            ),
            (
                "multipart/form-data; boundary*0*=utf-8''a%21; boundary*1=\"b\"",
                part("a!b", "preamble\r\n"),
            ),
        ] {
            assert_eq!(
                every_value(body.as_bytes(), Some(label), "email"),
                vec!["victim@mail.test"],
                "{label}"
            );
        }
    }

    #[test]
    fn a_part_is_named_as_multer_names_it() {
        for (disposition, name) in [
            (r#"form-data; name="my_field""#, Some("my_field")),
            ("form-data; name  =  my_field  ", Some("my_field")),
            ("form-data; name=email x", Some("email")),
            (r#"form-data; name="email"x"#, Some("email")),
            (r#"form-data; filename="a name=email;""#, Some("email")),
            (r#"form-data; filename="f.txt"; name="file""#, Some("file")),
            (
                r#"form-data; name="my\"field\"name""#,
                Some(r#"my"field"name"#),
            ),
            (r#"form-data; name=";"; filename=";""#, Some(";")),
            ("form-data; name=; filename=f", Some("")),
            // Its case is kept: `NAME` is no `name`.
            ("form-data; NAME=email", None),
            (r#"form-data; filename="f.txt""#, None),
            ("form-data; name; name=email", None),
            (r#"form-data; name="email"#, None),
        ] {
            assert_eq!(multer_name(disposition).as_deref(), name, "{disposition}");
        }
        // Either reading names the part.
        for disposition in [
            "name=email x",
            "NAME=\"email\"",
            "filename=\"a name=email;\"",
        ] {
            let body = format!(
                "--b\r\nContent-Disposition: form-data; {disposition}\r\n\r\nv@x\r\n--b--\r\n"
            );
            assert_eq!(read(body.as_bytes(), "email"), vec!["v@x"], "{disposition}");
        }
    }

    #[test]
    fn the_parts_are_read_from_each_place_a_parser_opens_the_body() {
        let delimiter = b"\r\n--b";
        assert_eq!(openings(b"--b\r\n", delimiter), vec![0]);
        assert_eq!(openings(b"x--b\r\n", delimiter), vec![1]);
        assert_eq!(openings(b"x--b\r\n\r\n--b\r\n", delimiter), vec![8, 1]);
        assert!(openings(b"--c\r\n", delimiter).is_empty());
        // A preamble with no line break before the first delimiter, as
        // multer reads it; and a part before the one RFC 2046 opens at.
        let label = Some("multipart/form-data; boundary=b");
        let body =
            b"x--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nv@x\r\n--b--\r\n";
        assert_eq!(labelled(body, label, "email"), vec!["v@x"]);
        let body = b"pre--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@x\r\n\
--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nb@x\r\n--b--\r\n";
        // RFC 2046's reading opens at the second part, multer's at the
        // first: both find the second, which is read once.
        assert_eq!(labelled(body, label, "email"), vec!["a@x", "b@x"]);
    }

    #[test]
    fn a_part_s_headers_run_to_the_blank_line_and_its_value_to_the_delimiter() {
        let label = Some("multipart/form-data; boundary=b");
        // A header line that opens with the boundary is a header.
        let body = b"--b\r\nContent-Disposition: form-data; name=\"email\"\r\n--b-x: y\r\n\r\n\
v@x\r\n--b--\r\n";
        assert_eq!(labelled(body, label, "email"), vec!["v@x"]);
        // A value that opens with the boundary is read whole.
        let body =
            b"--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\n--b@x\r\n--b--\r\n";
        assert_eq!(labelled(body, label, "email"), vec!["--b@x"]);
        // Spaces and tabs may follow a delimiter before its CRLF.
        let body = b"--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--b \t\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\r\nv@x\r\n--b--\r\n";
        assert_eq!(labelled(body, label, "email"), vec!["v@x"]);
    }

    #[test]
    fn a_part_s_value_is_read_as_bytes_and_as_its_charset_decodes_it() {
        let texts = |headers: &str, value: &[u8]| {
            let mut texts = part_texts(headers, value);
            texts.sort();
            texts
        };
        assert_eq!(texts("", b"v@x"), vec!["v@x"]);
        // ISO-2022-JP: an escape back to ASCII decodes to nothing.
        let headers = "Content-Disposition: form-data; name=email\r\n\
content-type: text/plain; charset=\"ISO-2022-JP\"";
        assert_eq!(texts(headers, b"v\x1b(B@x"), vec!["v\u{1b}(B@x", "v@x"]);
        // An unknown charset is UTF-8, as multer reads it.
        assert_eq!(
            texts("Content-Type: text/plain; charset=nope", b"v@x"),
            vec!["v@x"]
        );
        // A byte order mark overrides the charset, or its absence.
        assert_eq!(texts("", b"\xef\xbb\xbfv@x"), vec!["v@x", "\u{feff}v@x"]);
        assert_eq!(
            texts(
                "Content-Type: text/plain; charset=iso-8859-1",
                b"\xff\xfev\0@\0x\0"
            ),
            vec!["v@x", "\u{fffd}\u{fffd}v\0@\0x\0"]
        );
        // Latin-1 bytes are two texts: two identities.
        assert_eq!(
            texts("Content-Type: text/plain; charset=latin1", b"jos\xe9"),
            vec!["jos\u{e9}", "jos\u{fffd}"]
        );
    }

    #[test]
    fn json_reads_every_repeat_and_only_strings() {
        assert_eq!(
            read(br#"{"email":"a","email":"b"}"#, "email"),
            vec!["a", "b"]
        );
        assert!(read(br#"{"email":5}"#, "email").is_empty());
        assert!(read(b"[1,2]", "email").is_empty());
        assert!(read(b"{broken", "email").is_empty());
    }

    #[test]
    fn a_value_is_trimmed_as_laravel_trims_and_composed_after_lowercasing() {
        assert_eq!(
            normalised("\u{FEFF}\u{200B} Alice@Example.com\u{200E}\t"),
            "alice@example.com"
        );
        // Inside the value they stay.
        assert_eq!(normalised("a\u{200B}b"), "a\u{200B}b");
        assert_eq!(normalised("\u{FEFF}\u{200B}\u{200E}"), "");
        // `J̌` lowercases to `j` and a combining caron, composed to `ǰ`.
        assert_eq!(normalised("J\u{30C}OE"), "\u{1F0}oe");
        assert_eq!(normalised("\u{1F0}oe"), "\u{1F0}oe");
        assert_eq!(normalised("JOSE\u{301}"), "jos\u{E9}");
    }

    #[test]
    fn the_sink_collects_only_inside_the_middleware() {
        let req = Request::new(
            http::Request::get("/r?email=a@x&email=b@x")
                .body(String::new())
                .unwrap(),
        );
        let (key, mut named) = with_named_buckets(|| identity_key(&req, "email", "ns"));
        assert_eq!(key, "ns:ambiguous");
        named.buckets.sort();
        let mut expected = vec![id_key("ns", "a@x"), id_key("ns", "b@x")];
        expected.sort();
        assert_eq!(named.buckets, expected);
        assert!(!named.too_many);
        // Outside, nothing collects and nothing leaks into the next run.
        assert_eq!(identity_key(&req, "email", "ns"), "ns:ambiguous");
        let (_, named) = with_named_buckets(|| "plain".to_owned());
        assert_eq!(named, Named::default());
    }

    #[test]
    fn three_identities_name_no_bucket_and_are_refused() {
        let req = Request::new(
            http::Request::get("/r?email=a@x&email=b@x&email=c@x")
                .body(String::new())
                .unwrap(),
        );
        let (key, named) = with_named_buckets(|| identity_key(&req, "email", "ns"));
        assert_eq!(key, "ns:ambiguous");
        assert!(named.buckets.is_empty());
        assert!(named.too_many);
    }
}
