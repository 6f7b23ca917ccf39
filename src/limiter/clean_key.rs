//! `clean_rate_limiter_key`: the key cleaning of Laravel's
//! `RateLimiter::cleanRateLimiterKey`.

use std::borrow::Cow;

use super::entities::entity_name;

/// Cleans a rate-limiter key as Laravel's `cleanRateLimiterKey` does, so
/// that a key is stored as a Laravel application sharing the cache stores it.
///
/// Laravel runs PHP's `htmlentities` under its default flags over the key,
/// then reduces every `&name;` marker of two or more letters to its first
/// letter. Character by character, that is:
///
/// - a character with an HTML 4.01 named entity whose name is all letters
///   becomes the first letter of the name, case kept: `é` (`&eacute;`) is
///   `e`, `&` (`&amp;`) is `a`, `<` is `l`, `>` is `g`, `"` is `q`, `Æ`
///   (`&AElig;`) is `A`, `Ω` is `O`, `→` (`&rarr;`) is `r`;
/// - the seven characters whose entity name has a digit stay encoded: `¹`
///   `²` `³` `¼` `½` `¾` `∴` become `&sup1;` `&sup2;` `&sup3;` `&frac14;`
///   `&frac12;` `&frac34;` `&there4;`, and `'` becomes `&#039;`;
/// - every other character (ASCII letters, digits and punctuation, CJK,
///   emoji, `ğ`, `ł`, ...) is kept.
///
/// So `café` and `cafe` count in one bucket. Cleaning is not idempotent
/// for keys that keep an entity: pass the raw key to the counter methods,
/// which clean it once.
///
/// ```
/// use suprnova::limiter::clean_rate_limiter_key;
///
/// assert_eq!(clean_rate_limiter_key("café"), "cafe");
/// assert_eq!(clean_rate_limiter_key("a&b"), "aab");
/// assert_eq!(clean_rate_limiter_key("Ω"), "O");
/// assert_eq!(clean_rate_limiter_key("x²"), "x&sup2;");
/// assert_eq!(clean_rate_limiter_key("it's"), "it&#039;s");
/// assert_eq!(clean_rate_limiter_key("it&#039;s"), "ita#039;s");
/// ```
pub fn clean_rate_limiter_key(key: &str) -> String {
    cleaned(key).into_owned()
}

/// The bytes a key keeps as they are: ASCII but for the five characters
/// `htmlentities` encodes (`&`, `<`, `>`, `"`, `'`).
const KEPT_AS_IS: [bool; 256] = {
    let mut kept = [false; 256];
    let mut b = 0;
    while b < 128 {
        kept[b] = !matches!(b as u8, b'&' | b'<' | b'>' | b'"' | b'\'');
        b += 1;
    }
    kept
};

/// [`clean_rate_limiter_key`] without a copy of a key that needs no
/// cleaning, for the calls that only read the result.
pub(crate) fn cleaned(key: &str) -> Cow<'_, str> {
    // Most keys (addresses, ids, paths) are ASCII with none of the five
    // characters an entity replaces: they come back unchanged, found so by
    // one table read a byte.
    if key.bytes().all(|b| KEPT_AS_IS[usize::from(b)]) {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        if c == '\'' {
            // ENT_QUOTES encodes the apostrophe numerically; no letters, so
            // the marker stays.
            out.push_str("&#039;");
            continue;
        }
        match entity_name(c) {
            // Every all-letter name has at least two letters, so the
            // `&([a-z])[a-z]+;` pass reduces each one to its first letter.
            Some(name) if name.bytes().all(|b| b.is_ascii_alphabetic()) => {
                out.push_str(&name[..1]);
            }
            Some(name) => {
                out.push('&');
                out.push_str(name);
                out.push(';');
            }
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::entities;

    #[test]
    fn the_table_keeps_ascii_but_the_five_encoded_characters() {
        for b in 0..=255u8 {
            let expected = b.is_ascii() && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'');
            assert_eq!(KEPT_AS_IS[usize::from(b)], expected, "byte {b}");
        }
    }

    /// The character to letter table observed from PHP's own run of
    /// `htmlentities` plus Laravel's regex, written out independently of the
    /// entity names above.
    const OBSERVED: &[(char, &[u32])] = &[
        ('A', &[0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0x391]),
        ('B', &[0x392]),
        ('C', &[0xC7, 0x3A7]),
        ('D', &[0x394, 0x2021]),
        ('E', &[0xC8, 0xC9, 0xCA, 0xCB, 0xD0, 0x395, 0x397]),
        ('G', &[0x393]),
        ('I', &[0xCC, 0xCD, 0xCE, 0xCF, 0x399]),
        ('K', &[0x39A]),
        ('L', &[0x39B]),
        ('M', &[0x39C]),
        ('N', &[0xD1, 0x39D]),
        (
            'O',
            &[0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD8, 0x152, 0x39F, 0x3A9],
        ),
        ('P', &[0x3A0, 0x3A6, 0x3A8, 0x2033]),
        ('R', &[0x3A1]),
        ('S', &[0x160, 0x3A3]),
        ('T', &[0xDE, 0x398, 0x3A4]),
        ('U', &[0xD9, 0xDA, 0xDB, 0xDC, 0x3A5]),
        ('X', &[0x39E]),
        ('Y', &[0xDD, 0x178]),
        ('Z', &[0x396]),
        (
            'a',
            &[
                0x26, 0xB4, 0xE0, 0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0x3B1, 0x2135, 0x2220,
                0x2227, 0x2248,
            ],
        ),
        ('b', &[0xA6, 0x3B2, 0x201E, 0x2022]),
        (
            'c',
            &[
                0xA2, 0xA4, 0xA9, 0xB8, 0xE7, 0x2C6, 0x3C7, 0x21B5, 0x2229, 0x222A, 0x2245, 0x2663,
            ],
        ),
        ('d', &[0xB0, 0xF7, 0x3B4, 0x2020, 0x2193, 0x21D3, 0x2666]),
        (
            'e',
            &[
                0xE8, 0xE9, 0xEA, 0xEB, 0xF0, 0x3B5, 0x3B7, 0x2002, 0x2003, 0x20AC, 0x2203, 0x2205,
                0x2261,
            ],
        ),
        ('f', &[0x192, 0x2044, 0x2200]),
        ('g', &[0x3E, 0x3B3, 0x2265]),
        ('h', &[0x2026, 0x2194, 0x21D4, 0x2665]),
        (
            'i',
            &[
                0xA1, 0xBF, 0xEC, 0xED, 0xEE, 0xEF, 0x3B9, 0x2111, 0x2208, 0x221E, 0x222B,
            ],
        ),
        ('k', &[0x3BA]),
        (
            'l',
            &[
                0x3C, 0xAB, 0x3BB, 0x200E, 0x2018, 0x201C, 0x2039, 0x2190, 0x21D0, 0x2217, 0x2264,
                0x2308, 0x230A, 0x2329, 0x25CA,
            ],
        ),
        ('m', &[0xAF, 0xB5, 0xB7, 0x3BC, 0x2014, 0x2212]),
        (
            'n',
            &[
                0xA0, 0xAC, 0xF1, 0x3BD, 0x2013, 0x2207, 0x2209, 0x220B, 0x2260, 0x2284,
            ],
        ),
        (
            'o',
            &[
                0xAA, 0xBA, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF8, 0x153, 0x3BF, 0x3C9, 0x203E,
                0x2228, 0x2295, 0x2297,
            ],
        ),
        (
            'p',
            &[
                0xA3, 0xB1, 0xB6, 0x3C0, 0x3C6, 0x3C8, 0x3D6, 0x2030, 0x2032, 0x2202, 0x220F,
                0x221D, 0x22A5,
            ],
        ),
        ('q', &[0x22]),
        (
            'r',
            &[
                0xAE, 0xBB, 0x3C1, 0x200F, 0x2019, 0x201D, 0x203A, 0x211C, 0x2192, 0x21D2, 0x221A,
                0x2309, 0x230B, 0x232A,
            ],
        ),
        (
            's',
            &[
                0xA7, 0xAD, 0xDF, 0x161, 0x3C2, 0x3C3, 0x201A, 0x2211, 0x223C, 0x2282, 0x2283,
                0x2286, 0x2287, 0x22C5, 0x2660,
            ],
        ),
        (
            't',
            &[0xD7, 0xFE, 0x2DC, 0x3B8, 0x3C4, 0x3D1, 0x2009, 0x2122],
        ),
        (
            'u',
            &[0xA8, 0xF9, 0xFA, 0xFB, 0xFC, 0x3C5, 0x3D2, 0x2191, 0x21D1],
        ),
        ('w', &[0x2118]),
        ('x', &[0x3BE]),
        ('y', &[0xA5, 0xFD, 0xFF]),
        ('z', &[0x3B6, 0x200C, 0x200D]),
    ];

    const KEPT: &[(char, &str)] = &[
        ('\'', "&#039;"),
        ('\u{B2}', "&sup2;"),
        ('\u{B3}', "&sup3;"),
        ('\u{B9}', "&sup1;"),
        ('\u{BC}', "&frac14;"),
        ('\u{BD}', "&frac12;"),
        ('\u{BE}', "&frac34;"),
        ('\u{2234}', "&there4;"),
    ];

    #[test]
    fn every_entity_cleans_as_php_and_laravel_do() {
        let mut expected = std::collections::HashMap::new();
        for (letter, points) in OBSERVED {
            for &p in *points {
                let c = char::from_u32(p).unwrap();
                assert!(
                    expected.insert(c, letter.to_string()).is_none(),
                    "{c:?} twice"
                );
            }
        }
        for (c, kept) in KEPT {
            expected.insert(*c, (*kept).to_owned());
        }
        // 253 entries: the 252 named entities and the apostrophe.
        assert_eq!(expected.len(), 253);
        for (c, _) in entities::all() {
            assert!(
                expected.contains_key(c),
                "{c:?} has an entity but no expectation"
            );
        }
        for (c, want) in &expected {
            assert_eq!(&clean_rate_limiter_key(&c.to_string()), want, "{c:?}");
        }
    }

    #[test]
    fn characters_without_an_entity_are_kept() {
        for c in (0_u32..0x3000).filter_map(char::from_u32) {
            if entity_name(c).is_none() && c != '\'' {
                assert_eq!(clean_rate_limiter_key(&c.to_string()), c.to_string());
            }
        }
    }
}
