//! Route paths: literal segments and `{param}` segments.

use std::sync::Arc;

use crate::keys::percent_decoded;

/// One segment of a route path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// A parsed route path such as `/users/{id}/posts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathPattern {
    raw: String,
    segments: Vec<Segment>,
    /// The route in one spelling: its segments joined by single slashes,
    /// with no trailing one (`/users/{id}/posts`); shared with every request
    /// it matches.
    canonical: Arc<str>,
}

impl PathPattern {
    /// Parses a route path. It must start with `/`; a `{name}` segment
    /// captures one path segment under `name`.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        if !raw.starts_with('/') {
            return Err(format!("route path {raw:?} must start with '/'"));
        }
        let mut segments = Vec::new();
        for part in raw.split('/').filter(|s| !s.is_empty()) {
            if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                // Letters, digits and `_`, as Laravel names them: `{id?}`
                // (optional) and `{id:...}` are forms this router does not
                // have, and would otherwise be read as a parameter named so.
                if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    return Err(format!(
                        "route path {raw:?} has an invalid parameter {part:?}: a parameter is \
                         named with letters, digits and `_` (optional parameters, `{{id?}}`, \
                         are not supported)"
                    ));
                }
                // One name, one value: a second `{id}` would leave its value
                // unread (Laravel's route compiler refuses it too).
                if segments
                    .iter()
                    .any(|segment| matches!(segment, Segment::Param(other) if other == name))
                {
                    return Err(format!(
                        "route path {raw:?} names the parameter {name:?} twice"
                    ));
                }
                segments.push(Segment::Param(name.to_owned()));
            } else if part.contains(['{', '}']) {
                return Err(format!(
                    "route path {raw:?} has an invalid segment {part:?}"
                ));
            } else {
                let literal = percent_decoded(part, false).ok_or_else(|| {
                    format!(
                        "route path {raw:?} has a segment {part:?} that is not UTF-8 once decoded"
                    )
                })?;
                // Decoded, a `/` or a brace would spell another route's path
                // in the route's one name (`/files/a%2Fb` as `/files/a/b`).
                if literal.contains(['/', '{', '}']) {
                    return Err(format!(
                        "route path {raw:?} has a segment {part:?} that decodes to a `/` or a \
                         brace, which would name it as another route"
                    ));
                }
                segments.push(Segment::Literal(literal.into_owned()));
            }
        }
        let mut canonical = String::with_capacity(raw.len());
        for segment in &segments {
            canonical.push('/');
            match segment {
                Segment::Literal(literal) => canonical.push_str(literal),
                Segment::Param(name) => {
                    canonical.push('{');
                    canonical.push_str(name);
                    canonical.push('}');
                }
            }
        }
        if canonical.is_empty() {
            canonical.push('/');
        }
        Ok(Self {
            raw: raw.to_owned(),
            segments,
            canonical: canonical.into(),
        })
    }

    /// The route in one spelling (`/users/{id}` for `/users/{id}/`).
    pub(crate) fn canonical(&self) -> &Arc<str> {
        &self.canonical
    }

    /// Whether `self` and `other` match the same request paths: the same
    /// literal segments with parameters in the same places, whatever the
    /// parameters are named or the slashes written.
    pub(crate) fn matches_as(&self, other: &PathPattern) -> bool {
        self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|pair| match pair {
                    (Segment::Literal(a), Segment::Literal(b)) => a == b,
                    (Segment::Param(_), Segment::Param(_)) => true,
                    _ => false,
                })
    }

    /// The path as it was registered.
    pub(crate) fn as_str(&self) -> &str {
        &self.raw
    }

    /// Matches a request path; returns the captured parameters. Each
    /// segment is percent-decoded once, as Laravel decodes a path before it
    /// matches it: `/caf%C3%A9` matches the literal `/café`, and
    /// `/users/john%20doe` captures `john doe`. A segment that is not UTF-8
    /// once decoded matches nothing.
    pub(crate) fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let mut params = Vec::new();
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        for segment in &self.segments {
            let part = percent_decoded(parts.next()?, false)?;
            match segment {
                Segment::Literal(lit) if *lit == *part => {}
                Segment::Literal(_) => return None,
                Segment::Param(name) => params.push((name.clone(), part.into_owned())),
            }
        }
        if parts.next().is_some() {
            return None;
        }
        Some(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_params() {
        let p = PathPattern::parse("/users/{id}/posts").unwrap();
        assert_eq!(
            p.matches("/users/7/posts"),
            Some(vec![("id".to_owned(), "7".to_owned())])
        );
        assert_eq!(p.matches("/users/7"), None);
        assert_eq!(p.matches("/users/7/posts/8"), None);
        assert_eq!(PathPattern::parse("/").unwrap().matches("/"), Some(vec![]));
    }

    #[test]
    fn segments_are_percent_decoded_once() {
        let p = PathPattern::parse("/users/{name}").unwrap();
        for (path, name) in [
            ("/users/%34%32", "42"),
            ("/users/john%20doe", "john doe"),
            ("/users/caf%C3%A9", "café"),
            ("/users/café", "café"),
            ("/users/a%2Fb", "a/b"),
            ("/users/%2541", "%41"),
            ("/users/100%", "100%"),
            ("/users/a+b", "a+b"),
        ] {
            assert_eq!(
                p.matches(path),
                Some(vec![("name".to_owned(), name.to_owned())]),
                "{path}"
            );
        }
        assert_eq!(p.matches("/users/%FF"), None);
        let cafe = PathPattern::parse("/café").unwrap();
        assert_eq!(cafe.matches("/caf%C3%A9"), Some(vec![]));
        assert_eq!(cafe.matches("/café"), Some(vec![]));
        assert_eq!(
            PathPattern::parse("/%75sers").unwrap().matches("/users"),
            Some(vec![])
        );
        assert_eq!(
            PathPattern::parse("/users").unwrap().matches("/%75sers"),
            Some(vec![])
        );
    }

    #[test]
    fn invalid_paths_are_refused() {
        assert!(PathPattern::parse("users").is_err());
        assert!(PathPattern::parse("/a/{}").is_err());
        assert!(PathPattern::parse("/a/b{c}").is_err());
        for laravel_only in ["/users/{id?}", "/users/{id:[0-9]+}", "/a/{b-c}"] {
            let refused = PathPattern::parse(laravel_only).unwrap_err();
            assert!(refused.contains("letters, digits and `_`"), "{refused}");
        }
        assert!(PathPattern::parse("/users/{user_id}/{é}").is_ok());
        for another_name in ["/files/a%2Fb", "/t/%7Bid%7D", "/t/%7d"] {
            let refused = PathPattern::parse(another_name).unwrap_err();
            assert!(refused.contains("another route"), "{refused}");
        }
    }
}
