//! Reading `.env` as a Laravel application reads it.
//!
//! Laravel reads `.env` with phpdotenv v5; a team that moves a service off
//! Laravel keeps its `.env`, so this module reads that grammar: quotes,
//! comments, `export`, multi-line quoted values, `${NAME}` and nothing else
//! after a `$`, and the last line of a repeated name. The process
//! environment is set through `dotenvy`, which this module only hands text
//! it reads back exactly.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use super::ConfigError;

/// Loads `.env` from the working directory, or from the nearest parent
/// directory that has one, into the process environment, and returns its
/// path; `Ok(None)` when there is none.
///
/// The file is read as Laravel reads it (phpdotenv v5): `NAME=VALUE` lines,
/// `export` before a name allowed; blank lines and `#` comments skipped; a
/// value in single quotes taken as written, one in double quotes with the
/// escapes `\"`, `\\`, `\$`, `\f`, `\n`, `\r`, `\t` and `\v`, either going on
/// over the next lines until its quote closes; a `#` after a value starts a
/// comment; `${NAME}` outside single quotes replaced by the variable's value
/// (the process environment's, else an earlier line's; kept as written when
/// neither sets it), and any other `$` kept as written. A name holds
/// letters A to Z, digits, `_` and `.`. Of a name written on several lines,
/// the last line counts. Variables already set in the
/// process, even to an empty value or to one that is not UTF-8, win over the
/// file.
///
/// # Errors
///
/// [`ConfigError::DotEnv`] when the file cannot be read or a line does not
/// parse (an unquoted value holding a space, an unclosed quote, a line
/// without `=`, a NUL byte, text that is not UTF-8, a `${NAME}` of a
/// process variable whose value is not UTF-8, a name to set that starts
/// with a digit or `.`, which cannot be set here). The error names
/// the line and the variable and never shows a value; no variable is set.
///
/// ```no_run
/// if let Some(path) = suprnova::config::load_dotenv()? {
///     println!("loaded {}", path.display());
/// }
/// # Ok::<(), suprnova::config::ConfigError>(())
/// ```
pub fn load_dotenv() -> Result<Option<PathBuf>, ConfigError> {
    let dir = match std::env::current_dir() {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ConfigError::DotEnv(e.to_string())),
    };
    let Some(path) = find(&dir)? else {
        return Ok(None);
    };
    let content = std::fs::read(&path)
        .map_err(|e| ConfigError::DotEnv(format!("{}: {e}", path.display())))?;
    let entries = parse(&content, &|name| std::env::var_os(name))
        .map_err(|e| ConfigError::DotEnv(e.to_string()))?;
    let fresh = to_set(entries, |name| std::env::var_os(name).is_some());
    set(&fresh).map_err(|e| ConfigError::DotEnv(e.to_string()))?;
    Ok(Some(path))
}

/// `.env` in `dir` or its nearest parent that has one.
fn find(dir: &Path) -> Result<Option<PathBuf>, ConfigError> {
    for dir in dir.ancestors() {
        let candidate = dir.join(".env");
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => return Ok(Some(candidate)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError::DotEnv(format!("{}: {e}", candidate.display())));
            }
        }
    }
    Ok(None)
}

/// One `NAME=VALUE` line (or lines) of `.env`, its `${NAME}` references
/// replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The line of the file the entry starts on, from 1.
    line: usize,
    name: String,
    value: String,
}

/// A line of `.env` that is refused: where, whose, and why; never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LineError {
    /// The line of the file the entry starts on, from 1.
    line: usize,
    /// The variable, when its name was read.
    name: Option<String>,
    reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    NotUtf8,
    NoEquals,
    InvalidName,
    UnexpectedWhitespace,
    MissingClosingQuote,
    UnexpectedEscape,
    NulByte,
    NameNotSettable,
    NotPassed,
    ReferenceNotUtf8,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::NotUtf8 => "bytes that are not UTF-8; save the file as UTF-8",
            Reason::NoEquals => "no `=`; write NAME=VALUE, or start a comment with #",
            Reason::InvalidName => {
                "an invalid name; a name holds only letters A to Z, digits, `_` and `.`"
            }
            Reason::UnexpectedWhitespace => "unexpected whitespace; quote a value that holds spaces",
            Reason::MissingClosingQuote => "a missing closing quote; close the quote the value opens",
            Reason::UnexpectedEscape => {
                "an unexpected escape sequence; in double quotes a backslash starts one of \\\" \\\\ \\$ \\f \\n \\r \\t \\v, and in single quotes it is a backslash"
            }
            Reason::NulByte => "a NUL byte, which no environment variable can hold",
            Reason::NameNotSettable => {
                "a name that starts with a digit or `.`, which cannot be set here; start it with a letter or `_`"
            }
            Reason::NotPassed => "a value that could not be passed to the process environment",
            Reason::ReferenceNotUtf8 => {
                "a `${NAME}` of a variable whose value in the process is not UTF-8; set it in UTF-8"
            }
        })
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(
                f,
                "line {}, {name}: {} (the value is not shown)",
                self.line, self.reason
            ),
            None => write!(
                f,
                "line {}: {} (the line is not shown)",
                self.line, self.reason
            ),
        }
    }
}

/// The whitespace of a line: around a name and a value, and between a
/// value and its comment.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C')
}

fn trim(text: &str) -> &str {
    text.trim_matches(is_blank)
}

/// The lines of `content`, split on `\r\n`, `\n` or `\r`.
fn split_lines(content: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut at = 0;
    while at < content.len() {
        match content[at] {
            b'\n' => {
                lines.push(&content[start..at]);
                at += 1;
                start = at;
            }
            b'\r' => {
                lines.push(&content[start..at]);
                at += if content.get(at + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                start = at;
            }
            _ => at += 1,
        }
    }
    if start < content.len() {
        lines.push(&content[start..]);
    }
    lines
}

/// Whether `name` may name a variable: `[A-Za-z0-9_.]+`.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// The name written left of `=`: trimmed, `export` and whitespace before it
/// dropped, one pair of matching quotes around it dropped. `None` when it
/// is not a valid name.
fn parse_name(raw: &str) -> Option<String> {
    let mut name = trim(raw);
    if let Some(rest) = name.strip_prefix("export")
        && rest.starts_with(is_blank)
    {
        name = trim(rest);
    }
    let bytes = name.as_bytes();
    if bytes.len() > 2 && matches!(bytes[0], b'"' | b'\'') && bytes[0] == bytes[bytes.len() - 1] {
        name = &name[1..name.len() - 1];
    }
    is_valid_name(name).then(|| name.to_owned())
}

/// The variable named on a line that is not UTF-8, when its name is.
fn name_of_bytes(line: &[u8]) -> Option<String> {
    let at = line.iter().position(|&b| b == b'=')?;
    parse_name(std::str::from_utf8(&line[..at]).ok()?)
}

/// Reads `.env` content into its entries, in the order of the file, each
/// `${NAME}` replaced by `process(NAME)` or else by the value an earlier
/// line gave NAME.
fn parse(
    content: &[u8],
    process: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Vec<Entry>, LineError> {
    let content = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
    let lines = split_lines(content);
    let mut earlier: HashMap<String, String> = HashMap::new();
    let mut entries = Vec::new();
    let mut next = 0;
    while next < lines.len() {
        let line = next + 1;
        let raw = lines[next];
        next += 1;
        let Ok(text) = std::str::from_utf8(raw) else {
            return Err(LineError {
                line,
                name: name_of_bytes(raw),
                reason: Reason::NotUtf8,
            });
        };
        let trimmed = trim(text);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fail = |name: Option<&str>, reason| LineError {
            line,
            name: name.map(str::to_owned),
            reason,
        };
        let Some((name, value)) = text.split_once('=') else {
            return Err(fail(None, Reason::NoEquals));
        };
        let name = parse_name(name).ok_or_else(|| fail(None, Reason::InvalidName))?;
        let fail = |reason| fail(Some(&name), reason);
        let mut reader = ValueReader::default();
        reader
            .feed(value.trim_start_matches(is_blank))
            .map_err(fail)?;
        while reader.is_open() && next < lines.len() {
            let more = std::str::from_utf8(lines[next]).map_err(|_| fail(Reason::NotUtf8))?;
            next += 1;
            reader.feed("\n").map_err(fail)?;
            reader.feed(more).map_err(fail)?;
        }
        // A process value wins even when it is not UTF-8, which no value
        // read here can take in: the line is refused, not given the file's.
        let value = reader
            .finish()
            .map_err(fail)?
            .resolve(|name| match process(name) {
                Some(found) => found
                    .into_string()
                    .map(Some)
                    .map_err(|_| Reason::ReferenceNotUtf8),
                None => Ok(earlier.get(name).cloned()),
            })
            .map_err(fail)?;
        if value.contains('\0') {
            return Err(fail(Reason::NulByte));
        }
        earlier.insert(name.clone(), value.clone());
        entries.push(Entry { line, name, value });
    }
    Ok(entries)
}

/// Where the reading of a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Start,
    Unquoted,
    SingleQuoted,
    DoubleQuoted,
    Escape,
    AfterValue,
    Comment,
}

/// Reads a value, fed a line at a time, as phpdotenv's state machine does.
#[derive(Debug, Default)]
struct ValueReader {
    state: State,
    value: String,
    /// Where each `$` that may start a `${NAME}` is in `value`.
    references: Vec<usize>,
}

impl ValueReader {
    fn feed(&mut self, text: &str) -> Result<(), Reason> {
        for c in text.chars() {
            self.state = match (self.state, c) {
                (State::Comment, _) => return Ok(()),
                (State::Start, '\'') => State::SingleQuoted,
                (State::Start, '"') => State::DoubleQuoted,
                (State::Start | State::Unquoted | State::AfterValue, '#') => State::Comment,
                (State::Start | State::Unquoted, '$') => {
                    self.reference();
                    State::Unquoted
                }
                (State::Unquoted, c) if is_blank(c) => State::AfterValue,
                (State::Start | State::Unquoted, c) => {
                    self.value.push(c);
                    State::Unquoted
                }
                (State::SingleQuoted, '\'') => State::AfterValue,
                (State::SingleQuoted, c) => {
                    self.value.push(c);
                    State::SingleQuoted
                }
                (State::DoubleQuoted, '"') => State::AfterValue,
                (State::DoubleQuoted, '\\') => State::Escape,
                (State::DoubleQuoted, '$') => {
                    self.reference();
                    State::DoubleQuoted
                }
                (State::DoubleQuoted, c) => {
                    self.value.push(c);
                    State::DoubleQuoted
                }
                (State::Escape, c) => {
                    self.value.push(match c {
                        '"' | '\\' | '$' => c,
                        'f' => '\x0C',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'v' => '\x0B',
                        _ => return Err(Reason::UnexpectedEscape),
                    });
                    State::DoubleQuoted
                }
                (State::AfterValue, c) if is_blank(c) => State::AfterValue,
                (State::AfterValue, _) => return Err(Reason::UnexpectedWhitespace),
            };
        }
        Ok(())
    }

    fn reference(&mut self) {
        self.references.push(self.value.len());
        self.value.push('$');
    }

    /// Whether a quote is open, so that the value goes on over the next line.
    fn is_open(&self) -> bool {
        matches!(
            self.state,
            State::SingleQuoted | State::DoubleQuoted | State::Escape
        )
    }

    fn finish(self) -> Result<Self, Reason> {
        if self.is_open() {
            return Err(Reason::MissingClosingQuote);
        }
        Ok(self)
    }

    /// The value, each `${NAME}` that `lookup` gives a value replaced by it;
    /// the replacing text is not read again.
    fn resolve(
        self,
        lookup: impl Fn(&str) -> Result<Option<String>, Reason>,
    ) -> Result<String, Reason> {
        let mut value = self.value;
        for &at in self.references.iter().rev() {
            let Some((len, name)) = reference_at(&value[at..]) else {
                continue;
            };
            if let Some(found) = lookup(name)? {
                value.replace_range(at..at + len, &found);
            }
        }
        Ok(value)
    }
}

/// The length and the name of the `${NAME}` that `text` starts with.
fn reference_at(text: &str) -> Option<(usize, &str)> {
    let rest = text.strip_prefix("${")?;
    let end = rest.find('}')?;
    let name = &rest[..end];
    is_valid_name(name).then_some((end + 3, name))
}

/// The entries to set: the last of each name, but for the names `in_process`
/// already has.
fn to_set(entries: Vec<Entry>, in_process: impl Fn(&str) -> bool) -> Vec<Entry> {
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        last.insert(entry.name.clone(), i);
    }
    entries
        .into_iter()
        .enumerate()
        .filter(|(i, entry)| last[&entry.name] == *i && !in_process(&entry.name))
        .map(|(_, entry)| entry)
        .collect()
}

/// Sets `entries` in the process environment through `dotenvy`, from text
/// it reads back exactly, which is checked first: either every entry is set
/// or none.
fn set(entries: &[Entry]) -> Result<(), LineError> {
    let refuse = |entry: &Entry, reason| LineError {
        line: entry.line,
        name: Some(entry.name.clone()),
        reason,
    };
    for entry in entries {
        if !entry
            .name
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        {
            return Err(refuse(entry, Reason::NameNotSettable));
        }
    }
    let text = render(entries);
    let mut read = dotenvy::from_read_iter(text.as_bytes());
    for entry in entries {
        match read.next() {
            Some(Ok((name, value))) if name == entry.name && value == entry.value => {}
            _ => return Err(refuse(entry, Reason::NotPassed)),
        }
    }
    if read.next().is_some() {
        return Err(LineError {
            line: entries.last().map_or(1, |e| e.line),
            name: None,
            reason: Reason::NotPassed,
        });
    }
    dotenvy::from_read_iter(text.as_bytes())
        .load_override()
        .map_err(|_| LineError {
            line: entries.first().map_or(1, |e| e.line),
            name: None,
            reason: Reason::NotPassed,
        })
}

/// `entries` as `dotenvy` reads them back: one line each, the value in
/// single quotes (inside which `dotenvy` takes every character as written
/// but `'`, a newline, and `\`, which would stop its search for the line's
/// end), and those three written outside them as the escapes `\'`, `\n`
/// and `\\`.
fn render(entries: &[Entry]) -> String {
    let mut text = String::new();
    for entry in entries {
        text.push_str(&entry.name);
        text.push('=');
        render_value(&entry.value, &mut text);
        text.push('\n');
    }
    text
}

fn render_value(value: &str, text: &mut String) {
    if value.is_empty() {
        text.push_str("''");
        return;
    }
    let mut quoted = false;
    for c in value.chars() {
        let escape = match c {
            '\'' => Some("\\'"),
            '\n' => Some("\\n"),
            '\\' => Some("\\\\"),
            _ => None,
        };
        match escape {
            Some(escape) => {
                if quoted {
                    text.push('\'');
                    quoted = false;
                }
                text.push_str(escape);
            }
            None => {
                if !quoted {
                    text.push('\'');
                    quoted = true;
                }
                text.push(c);
            }
        }
    }
    if quoted {
        text.push('\'');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries of `content` as pairs, with no process environment.
    fn read(content: &str) -> Result<Vec<(String, String)>, String> {
        read_with(content, &[])
    }

    /// The entries of `content` as pairs, the process environment holding
    /// `process`.
    fn read_with(content: &str, process: &[(&str, &str)]) -> Result<Vec<(String, String)>, String> {
        let process: HashMap<String, String> = process
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(content.as_bytes(), &|name| {
            process.get(name).map(OsString::from)
        })
        .map(|entries| entries.into_iter().map(|e| (e.name, e.value)).collect())
        .map_err(|e| e.to_string())
    }

    fn pairs(list: &[(&str, &str)]) -> Result<Vec<(String, String)>, String> {
        Ok(list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// The one value `content` gives `A`.
    fn value(content: &str) -> String {
        match read(content) {
            Ok(entries) => {
                assert_eq!(entries.len(), 1, "{content:?}: {entries:?}");
                entries[0].1.clone()
            }
            Err(e) => panic!("{content:?}: {e}"),
        }
    }

    #[test]
    fn lines_split_on_every_line_end_and_a_byte_order_mark_is_skipped() {
        assert_eq!(
            read("\u{FEFF}A=1\r\nB=2\nC=3\rD=4"),
            pairs(&[("A", "1"), ("B", "2"), ("C", "3"), ("D", "4")])
        );
        assert_eq!(
            read("\n  \r\n\t\n# c=1\n   # B=2\nA=1\n#"),
            pairs(&[("A", "1")])
        );
        assert_eq!(read(""), pairs(&[]));
    }

    #[test]
    fn names() {
        for (line, name) in [
            ("A=1", "A"),
            (" A = 1 ", "A"),
            ("export A=1", "A"),
            ("export\t  A=1", "A"),
            ("exportA=1", "exportA"),
            ("export=1", "export"),
            ("export =1", "export"),
            ("\"A\"=1", "A"),
            ("'A'=1", "A"),
            ("export 'A.b_2'=1", "A.b_2"),
            ("1A=1", "1A"),
        ] {
            assert_eq!(read(line), pairs(&[(name, "1")]), "{line:?}");
        }
        for line in [
            "A B=1",
            "A-B=1",
            "\"A'=1",
            "\"\"=1",
            "=1",
            "É=1",
            "export \"A'=1",
            "${A}=1",
        ] {
            assert_eq!(
                read(line),
                Err(
                    "line 1: an invalid name; a name holds only letters A to Z, digits, `_` and `.` (the line is not shown)"
                        .to_owned()
                ),
                "{line:?}"
            );
        }
    }

    #[test]
    fn a_line_without_an_equals_sign_is_refused_without_showing_it() {
        assert_eq!(
            read("A=1\nhunter2\n"),
            Err(
                "line 2: no `=`; write NAME=VALUE, or start a comment with # (the line is not shown)"
                    .to_owned()
            )
        );
        assert_eq!(
            read("export A"),
            Err(
                "line 1: no `=`; write NAME=VALUE, or start a comment with # (the line is not shown)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn the_value_is_split_at_the_first_equals_sign_and_trimmed() {
        assert_eq!(value("A=b=c"), "b=c");
        assert_eq!(value("A=\t x \t"), "x");
        assert_eq!(value("A="), "");
        assert_eq!(value("A=   "), "");
        assert_eq!(value("A=''"), "");
        assert_eq!(value("A=\"\""), "");
    }

    #[test]
    fn unquoted_values() {
        assert_eq!(value("A=abc"), "abc");
        assert_eq!(value("A=a#b"), "a");
        assert_eq!(value("A=a #b"), "a");
        assert_eq!(value("A=#b"), "");
        assert_eq!(value("A= # b"), "");
        assert_eq!(value("A=a\\nb\\"), "a\\nb\\");
        assert_eq!(value("A=it's\"x\""), "it's\"x\"");
        assert_eq!(value("A=shop$1_cache_"), "shop$1_cache_");
        assert_eq!(value("A=pa$word"), "pa$word");
        assert_eq!(value("A=$"), "$");
        assert_eq!(value("A=a  "), "a");
    }

    #[test]
    fn single_quoted_values_are_taken_as_written() {
        assert_eq!(value("A='a b'"), "a b");
        assert_eq!(value("A='a\\n${B} \"x\" # $'"), "a\\n${B} \"x\" # $");
        assert_eq!(value("A='x' # c"), "x");
        assert_eq!(value("A='x'#c"), "x");
        assert_eq!(value("A='x'  "), "x");
        assert_eq!(value("A=' x '"), " x ");
        assert_eq!(
            read_with("B=1\nA='${B}'", &[("B", "2")]),
            pairs(&[("B", "1"), ("A", "${B}")])
        );
    }

    #[test]
    fn double_quoted_values_read_their_escapes() {
        assert_eq!(value("A=\"a b\""), "a b");
        assert_eq!(value(r#"A="\"\\\$\f\n\r\t\v""#), "\"\\$\x0C\n\r\t\x0B");
        assert_eq!(value(r#"A="\nfoo""#), "\nfoo");
        assert_eq!(value("A=\"it's # $\" # c"), "it's # $");
        assert_eq!(value("A=\"x\"#c"), "x");
        for escape in ["\\a", "\\'", "\\#", "\\ ", "\\{", "\\0", "\\u0041"] {
            assert_eq!(
                read(&format!("A=\"hunter2{escape}\"")),
                Err("line 1, A: an unexpected escape sequence; in double quotes a backslash starts one of \\\" \\\\ \\$ \\f \\n \\r \\t \\v, and in single quotes it is a backslash (the value is not shown)".to_owned()),
                "{escape}"
            );
        }
    }

    #[test]
    fn anything_after_a_value_but_whitespace_and_a_comment_is_refused() {
        let refused = Err(
            "line 2, REDIS_PASSWORD: unexpected whitespace; quote a value that holds spaces (the value is not shown)"
                .to_owned(),
        );
        for line in [
            "REDIS_PASSWORD=hunter2 and more",
            "REDIS_PASSWORD='hunter2' and more",
            "REDIS_PASSWORD=\"hunter2\" x",
            "REDIS_PASSWORD='hunter2'x",
            "REDIS_PASSWORD=\"hunter2\"'x'",
            "REDIS_PASSWORD=hunter2 'x'",
        ] {
            assert_eq!(read(&format!("A=1\n{line}")), refused, "{line:?}");
        }
    }

    #[test]
    fn a_quote_that_does_not_close_on_its_line_goes_on_over_the_next_lines() {
        assert_eq!(
            read("A=\"first\n# not a comment\n\nlast\" # c\nB=2"),
            pairs(&[("A", "first\n# not a comment\n\nlast"), ("B", "2")])
        );
        assert_eq!(
            read("A='first\r\n  second\\'\r\nB=2"),
            pairs(&[("A", "first\n  second\\"), ("B", "2")])
        );
        assert_eq!(
            read("A=\"x\\\"\ny\"\nB=2"),
            pairs(&[("A", "x\"\ny"), ("B", "2")])
        );
        // The lines after a value that goes on are counted.
        assert_eq!(
            read("A=\"x\n\ny\"\nB=1\nC=no good"),
            Err(
                "line 5, C: unexpected whitespace; quote a value that holds spaces (the value is not shown)"
                    .to_owned()
            )
        );
        // An error in a later line of the value names the line it starts on.
        assert_eq!(
            read("A=1\nB=\"x\n\\q\""),
            Err("line 2, B: an unexpected escape sequence; in double quotes a backslash starts one of \\\" \\\\ \\$ \\f \\n \\r \\t \\v, and in single quotes it is a backslash (the value is not shown)".to_owned())
        );
    }

    #[test]
    fn a_quote_still_open_at_the_end_of_the_file_is_refused() {
        for content in [
            "A=1\nAPP_NAME=\"My Shop\nCACHE_STORE=redis\nREDIS_PASSWORD=hunter2\n",
            "A=1\nAPP_NAME='My Shop\nREDIS_PASSWORD=hunter2",
            "A=1\nAPP_NAME=\"My Shop\\\"",
            "A=1\nAPP_NAME=\"\\",
        ] {
            assert_eq!(
                read(content),
                Err("line 2, APP_NAME: a missing closing quote; close the quote the value opens (the value is not shown)".to_owned()),
                "{content:?}"
            );
        }
    }

    #[test]
    fn references_are_replaced_from_the_process_then_from_earlier_lines() {
        assert_eq!(
            read("APP_NAME=Shop\nP=\"${APP_NAME}_db_\"\nQ=${APP_NAME}x"),
            pairs(&[("APP_NAME", "Shop"), ("P", "Shop_db_"), ("Q", "Shopx")])
        );
        // The process wins, and the last earlier line.
        assert_eq!(
            read_with("A=file\nB=${A}\nC=1\nC=2\nD=${C}", &[("A", "process")]),
            pairs(&[
                ("A", "file"),
                ("B", "process"),
                ("C", "1"),
                ("C", "2"),
                ("D", "2")
            ])
        );
        // A name nothing sets, or only a later line, stays as written.
        assert_eq!(
            read("A=${UNDEFINED}_x\nB=\"${C}\"\nC=1"),
            pairs(&[("A", "${UNDEFINED}_x"), ("B", "${C}"), ("C", "1")])
        );
        // A `$` that starts no `${NAME}` is kept.
        for kept in ["$B", "${B", "${}", "${B C}", "$ {B}", "$$", "${B-x}"] {
            assert_eq!(
                read(&format!("B=1\nA=\"{kept}\"")).unwrap()[1].1,
                kept,
                "{kept}"
            );
        }
        // Escaped, a `$` starts none.
        assert_eq!(read("B=1\nA=\"\\${B}${B}\\$\"").unwrap()[1].1, "${B}1$");
        // The replacing text is not read again.
        assert_eq!(read("C=z\nB='${C}'\nA=\"${B}${C}\"").unwrap()[2].1, "${C}z");
        assert_eq!(read("A.B=1\nC=${A.B}").unwrap()[1].1, "1");
    }

    #[test]
    fn a_nul_byte_is_refused_naming_the_line_and_variable() {
        for content in [
            "A=1\nREDIS_PASSWORD=hunter2\0",
            "A=1\nREDIS_PASSWORD='hunter2\0'",
        ] {
            assert_eq!(
                read(content),
                Err("line 2, REDIS_PASSWORD: a NUL byte, which no environment variable can hold (the value is not shown)".to_owned())
            );
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_naming_the_line() {
        let refuse = |content: &[u8]| {
            parse(content, &|_| None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            refuse(b"A=1\nREDIS_PASSWORD=hunter2\xa0\n"),
            Err("line 2, REDIS_PASSWORD: bytes that are not UTF-8; save the file as UTF-8 (the value is not shown)".to_owned())
        );
        assert_eq!(
            refuse(b"A=1\n\n# caf\xe9\n"),
            Err(
                "line 3: bytes that are not UTF-8; save the file as UTF-8 (the line is not shown)"
                    .to_owned()
            )
        );
        assert_eq!(
            refuse(b"A=1\nB=\"x\n\xff\"\n"),
            Err("line 2, B: bytes that are not UTF-8; save the file as UTF-8 (the value is not shown)".to_owned())
        );
    }

    #[test]
    fn no_error_shows_the_value_or_another_line() {
        for content in [
            "A=hunter2 and more",
            "A=\"hunter2\nB=hunter2",
            "A='hunter2",
            "A=\"hunter2\\x\"",
            "A=\"hunter2\" hunter2",
            "hunter2",
            "hunter2 x=1",
            "A=hunter2\0",
            "A=1\nB=\"x\"\nhunter2",
        ] {
            let refused = read(content).unwrap_err();
            assert!(!refused.contains("hunter2"), "{content:?}: {refused}");
        }
    }

    #[test]
    fn the_last_line_of_a_name_is_set_unless_the_process_has_it() {
        let entries = parse(
            b"APP_TRUSTED_PROXIES=\nA=1\nAPP_TRUSTED_PROXIES=10.0.0.5\nB=2\nAPP_TRUSTED_PROXIES=10.0.0.6\nB=3",
            &|_| None,
        )
        .unwrap();
        let set: Vec<(usize, String, String)> = to_set(entries, |name| name == "A")
            .into_iter()
            .map(|e| (e.line, e.name, e.value))
            .collect();
        assert_eq!(
            set,
            [
                (5, "APP_TRUSTED_PROXIES".to_owned(), "10.0.0.6".to_owned()),
                (6, "B".to_owned(), "3".to_owned()),
            ]
        );
    }

    /// The values `render` writes, read back by `dotenvy` unchanged.
    #[test]
    fn rendered_values_are_read_back_exactly() {
        let values = [
            "",
            "plain",
            "'",
            "''",
            "\"",
            "$",
            "$A",
            "${A}",
            "${PATH}",
            "a # b",
            "#",
            "\\",
            "\\\\'",
            "\\n",
            "\n",
            "a\nb\n",
            "\r\n",
            " lead and trail ",
            "\ttab\t",
            "\x0B\x0C",
            "grüße, 東京 🦀",
            "it's \"quoted\" \\$ ${X} # \\ \n  \t end\\",
            "=",
            "'\\'",
            "\u{2028}\u{85}",
        ];
        let entries: Vec<Entry> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Entry {
                line: i + 1,
                name: format!("V_{i}"),
                value: (*v).to_owned(),
            })
            .collect();
        let text = render(&entries);
        let back: Vec<(String, String)> = dotenvy::from_read_iter(text.as_bytes())
            .map(|item| item.unwrap())
            .collect();
        let wanted: Vec<(String, String)> = entries
            .iter()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect();
        assert_eq!(back, wanted, "{text}");
        assert_eq!(render(&entries[..1]), "V_0=''\n");
        let mut one = String::new();
        render_value("it's\na\\b", &mut one);
        assert_eq!(one, "'it'\\''s'\\n'a'\\\\'b'");
    }

    #[test]
    fn a_name_that_cannot_be_set_is_refused_before_anything_is_set() {
        let entries = [
            Entry {
                line: 1,
                name: "FINE".to_owned(),
                value: "1".to_owned(),
            },
            Entry {
                line: 2,
                name: "1A".to_owned(),
                value: "hunter2".to_owned(),
            },
        ];
        assert_eq!(
            set(&entries).unwrap_err().to_string(),
            "line 2, 1A: a name that starts with a digit or `.`, which cannot be set here; start it with a letter or `_` (the value is not shown)"
        );
    }
}
