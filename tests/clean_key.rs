//! `clean_rate_limiter_key`: PHP's `htmlentities` then Laravel's
//! `&name;` reduction, on the examples of the API reference, Laravel's
//! observed runs, and characters from every part of the HTML 4.01 table.

use std::sync::Arc;

use suprnova::RateLimiter;
use suprnova::cache::{Cache, MemoryStore, Store};
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::limiter::{CacheRateLimiter, clean_rate_limiter_key};

#[test]
fn the_api_reference_examples() {
    assert_eq!(RateLimiter::clean_rate_limiter_key("café"), "cafe");
    assert_eq!(RateLimiter::clean_rate_limiter_key("a&b"), "aab");
    assert_eq!(RateLimiter::clean_rate_limiter_key("Ω"), "O");
    // Entities named with digits, and the apostrophe, stay encoded.
    assert_eq!(RateLimiter::clean_rate_limiter_key("x²"), "x&sup2;");
    assert_eq!(RateLimiter::clean_rate_limiter_key("it's"), "it&#039;s");
    // Cleaning a cleaned key changes it again.
    assert_eq!(
        RateLimiter::clean_rate_limiter_key(&RateLimiter::clean_rate_limiter_key("it's")),
        "ita#039;s"
    );
}

#[test]
fn laravels_observed_examples() {
    for (raw, cleaned) in [
        ("jôhn", "john"),
        ("JÔHN Ærø ß œ", "JOHN Aro s o"),
        ("a&b<c>d\"e'f", "aablcgdqe&#039;f"),
        ("&amp;", "aamp;"),
        ("john'doe", "john&#039;doe"),
        (
            "½ ¼ ² ° µ ¶ €™ © ®",
            "&frac12; &frac14; &sup2; d m p et c r",
        ),
        ("日本語 😀 ğ ş ı ł", "日本語 😀 ğ ş ı ł"),
    ] {
        assert_eq!(clean_rate_limiter_key(raw), cleaned, "{raw}");
    }
}

#[test]
fn characters_across_the_html_401_table() {
    let cases: &[(char, &str)] = &[
        // Latin-1 letters and signs.
        ('À', "A"),
        ('Å', "A"),
        ('Ç', "C"),
        ('È', "E"),
        ('Ð', "E"),
        ('Ñ', "N"),
        ('Ø', "O"),
        ('Þ', "T"),
        ('Ý', "Y"),
        ('ß', "s"),
        ('à', "a"),
        ('æ', "a"),
        ('ð', "e"),
        ('ñ', "n"),
        ('þ', "t"),
        ('ÿ', "y"),
        ('\u{A0}', "n"),
        ('¡', "i"),
        ('¢', "c"),
        ('£', "p"),
        ('¥', "y"),
        ('§', "s"),
        ('«', "l"),
        ('¬', "n"),
        ('\u{AD}', "s"),
        ('¯', "m"),
        ('±', "p"),
        ('´', "a"),
        ('·', "m"),
        ('¸', "c"),
        ('ª', "o"),
        ('»', "r"),
        ('¿', "i"),
        ('×', "t"),
        ('÷', "d"),
        ('¹', "&sup1;"),
        ('³', "&sup3;"),
        ('¾', "&frac34;"),
        // Latin Extended and spacing modifiers.
        ('Œ', "O"),
        ('š', "s"),
        ('Ÿ', "Y"),
        ('ƒ', "f"),
        ('ˆ', "c"),
        ('˜', "t"),
        // Greek.
        ('Α', "A"),
        ('Δ', "D"),
        ('Θ', "T"),
        ('Ξ', "X"),
        ('Σ', "S"),
        ('Ψ', "P"),
        ('α', "a"),
        ('η', "e"),
        ('λ', "l"),
        ('ς', "s"),
        ('ω', "o"),
        ('ϑ', "t"),
        ('ϒ', "u"),
        ('ϖ', "p"),
        // General punctuation.
        ('\u{2002}', "e"),
        ('\u{2009}', "t"),
        ('\u{200C}', "z"),
        ('\u{200E}', "l"),
        ('\u{200F}', "r"),
        ('–', "n"),
        ('—', "m"),
        ('‘', "l"),
        ('’', "r"),
        ('‚', "s"),
        ('“', "l"),
        ('„', "b"),
        ('†', "d"),
        ('‡', "D"),
        ('•', "b"),
        ('…', "h"),
        ('‰', "p"),
        ('′', "p"),
        ('″', "P"),
        ('‹', "l"),
        ('›', "r"),
        ('‾', "o"),
        ('⁄', "f"),
        // Letterlike symbols.
        ('ℑ', "i"),
        ('℘', "w"),
        ('ℜ', "r"),
        ('ℵ', "a"),
        // Arrows.
        ('←', "l"),
        ('↑', "u"),
        ('↓', "d"),
        ('↔', "h"),
        ('↵', "c"),
        ('⇐', "l"),
        ('⇒', "r"),
        ('⇔', "h"),
        // Mathematical operators.
        ('∀', "f"),
        ('∂', "p"),
        ('∃', "e"),
        ('∅', "e"),
        ('∇', "n"),
        ('∈', "i"),
        ('∉', "n"),
        ('∋', "n"),
        ('∏', "p"),
        ('∑', "s"),
        ('−', "m"),
        ('∗', "l"),
        ('√', "r"),
        ('∝', "p"),
        ('∠', "a"),
        ('∧', "a"),
        ('∨', "o"),
        ('∩', "c"),
        ('∫', "i"),
        ('∴', "&there4;"),
        ('∼', "s"),
        ('≅', "c"),
        ('≈', "a"),
        ('≠', "n"),
        ('≡', "e"),
        ('≤', "l"),
        ('≥', "g"),
        ('⊂', "s"),
        ('⊄', "n"),
        ('⊆', "s"),
        ('⊕', "o"),
        ('⊗', "o"),
        ('⊥', "p"),
        ('⋅', "s"),
        // Miscellaneous technical, shapes and symbols.
        ('⌈', "l"),
        ('⌉', "r"),
        ('⌊', "l"),
        ('⌋', "r"),
        ('\u{2329}', "l"),
        ('\u{232A}', "r"),
        ('◊', "l"),
        ('♠', "s"),
        ('♣', "c"),
        ('♥', "h"),
        ('♦', "d"),
    ];
    assert!(cases.len() >= 40);
    for (c, cleaned) in cases {
        assert_eq!(
            &clean_rate_limiter_key(&c.to_string()),
            cleaned,
            "{c:?} (U+{:04X})",
            *c as u32
        );
    }
    // Inside a key, each character is cleaned on its own.
    // The accented ά (U+03AC) has no HTML 4.01 entity and is kept.
    assert_eq!(
        clean_rate_limiter_key("user:Σωκράτης→∞"),
        "user:Sokr\u{3AC}tesri"
    );
}

#[test]
fn characters_outside_the_table_are_kept() {
    for key in [
        "ascii-key_01:/.@+=%",
        "ğşıł",
        "ĉĝ",
        "Ж",
        "ά",
        "日本語",
        "😀",
        "",
        "  ",
    ] {
        assert_eq!(clean_rate_limiter_key(key), key);
    }
    assert_eq!(clean_rate_limiter_key("€uro ä"), "euro a");
}

#[tokio::test]
async fn cafe_and_cafe_with_an_accent_count_in_one_bucket() {
    let clock = FakeClock::at_unix(946_684_800);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = App::new();
    app.install::<dyn Store>(store.clone());
    app.install(Arc::new(CacheRateLimiter::new(store, clock.shared())));
    app.scope(async {
        assert!(!RateLimiter::hit_and_check("api:café", 2, 60).await.unwrap());
        assert!(!RateLimiter::hit_and_check("api:cafe", 2, 60).await.unwrap());
        assert!(RateLimiter::hit_and_check("api:café", 2, 60).await.unwrap());
        assert_eq!(RateLimiter::attempts("api:cafe").await.unwrap(), 3);
        assert_eq!(Cache::get("api:cafe").await.unwrap().as_deref(), Some("3"));
        assert_eq!(Cache::get("api:café").await.unwrap(), None);
    })
    .await;
}

/// Laravel's whole table, as generated from PHP's `htmlentities` (253
/// characters): 245 become a letter, 8 stay as entity text, and every
/// other character is kept.
#[test]
fn every_character_cleans_as_php_cleans_it() {
    let letters: &[(u32, &str)] = &[
        (0x0022, "q"),
        (0x0026, "a"),
        (0x003C, "l"),
        (0x003E, "g"),
        (0x00A0, "n"),
        (0x00A1, "i"),
        (0x00A2, "c"),
        (0x00A3, "p"),
        (0x00A4, "c"),
        (0x00A5, "y"),
        (0x00A6, "b"),
        (0x00A7, "s"),
        (0x00A8, "u"),
        (0x00A9, "c"),
        (0x00AA, "o"),
        (0x00AB, "l"),
        (0x00AC, "n"),
        (0x00AD, "s"),
        (0x00AE, "r"),
        (0x00AF, "m"),
        (0x00B0, "d"),
        (0x00B1, "p"),
        (0x00B4, "a"),
        (0x00B5, "m"),
        (0x00B6, "p"),
        (0x00B7, "m"),
        (0x00B8, "c"),
        (0x00BA, "o"),
        (0x00BB, "r"),
        (0x00BF, "i"),
        (0x00C0, "A"),
        (0x00C1, "A"),
        (0x00C2, "A"),
        (0x00C3, "A"),
        (0x00C4, "A"),
        (0x00C5, "A"),
        (0x00C6, "A"),
        (0x00C7, "C"),
        (0x00C8, "E"),
        (0x00C9, "E"),
        (0x00CA, "E"),
        (0x00CB, "E"),
        (0x00CC, "I"),
        (0x00CD, "I"),
        (0x00CE, "I"),
        (0x00CF, "I"),
        (0x00D0, "E"),
        (0x00D1, "N"),
        (0x00D2, "O"),
        (0x00D3, "O"),
        (0x00D4, "O"),
        (0x00D5, "O"),
        (0x00D6, "O"),
        (0x00D7, "t"),
        (0x00D8, "O"),
        (0x00D9, "U"),
        (0x00DA, "U"),
        (0x00DB, "U"),
        (0x00DC, "U"),
        (0x00DD, "Y"),
        (0x00DE, "T"),
        (0x00DF, "s"),
        (0x00E0, "a"),
        (0x00E1, "a"),
        (0x00E2, "a"),
        (0x00E3, "a"),
        (0x00E4, "a"),
        (0x00E5, "a"),
        (0x00E6, "a"),
        (0x00E7, "c"),
        (0x00E8, "e"),
        (0x00E9, "e"),
        (0x00EA, "e"),
        (0x00EB, "e"),
        (0x00EC, "i"),
        (0x00ED, "i"),
        (0x00EE, "i"),
        (0x00EF, "i"),
        (0x00F0, "e"),
        (0x00F1, "n"),
        (0x00F2, "o"),
        (0x00F3, "o"),
        (0x00F4, "o"),
        (0x00F5, "o"),
        (0x00F6, "o"),
        (0x00F7, "d"),
        (0x00F8, "o"),
        (0x00F9, "u"),
        (0x00FA, "u"),
        (0x00FB, "u"),
        (0x00FC, "u"),
        (0x00FD, "y"),
        (0x00FE, "t"),
        (0x00FF, "y"),
        (0x0152, "O"),
        (0x0153, "o"),
        (0x0160, "S"),
        (0x0161, "s"),
        (0x0178, "Y"),
        (0x0192, "f"),
        (0x02C6, "c"),
        (0x02DC, "t"),
        (0x0391, "A"),
        (0x0392, "B"),
        (0x0393, "G"),
        (0x0394, "D"),
        (0x0395, "E"),
        (0x0396, "Z"),
        (0x0397, "E"),
        (0x0398, "T"),
        (0x0399, "I"),
        (0x039A, "K"),
        (0x039B, "L"),
        (0x039C, "M"),
        (0x039D, "N"),
        (0x039E, "X"),
        (0x039F, "O"),
        (0x03A0, "P"),
        (0x03A1, "R"),
        (0x03A3, "S"),
        (0x03A4, "T"),
        (0x03A5, "U"),
        (0x03A6, "P"),
        (0x03A7, "C"),
        (0x03A8, "P"),
        (0x03A9, "O"),
        (0x03B1, "a"),
        (0x03B2, "b"),
        (0x03B3, "g"),
        (0x03B4, "d"),
        (0x03B5, "e"),
        (0x03B6, "z"),
        (0x03B7, "e"),
        (0x03B8, "t"),
        (0x03B9, "i"),
        (0x03BA, "k"),
        (0x03BB, "l"),
        (0x03BC, "m"),
        (0x03BD, "n"),
        (0x03BE, "x"),
        (0x03BF, "o"),
        (0x03C0, "p"),
        (0x03C1, "r"),
        (0x03C2, "s"),
        (0x03C3, "s"),
        (0x03C4, "t"),
        (0x03C5, "u"),
        (0x03C6, "p"),
        (0x03C7, "c"),
        (0x03C8, "p"),
        (0x03C9, "o"),
        (0x03D1, "t"),
        (0x03D2, "u"),
        (0x03D6, "p"),
        (0x2002, "e"),
        (0x2003, "e"),
        (0x2009, "t"),
        (0x200C, "z"),
        (0x200D, "z"),
        (0x200E, "l"),
        (0x200F, "r"),
        (0x2013, "n"),
        (0x2014, "m"),
        (0x2018, "l"),
        (0x2019, "r"),
        (0x201A, "s"),
        (0x201C, "l"),
        (0x201D, "r"),
        (0x201E, "b"),
        (0x2020, "d"),
        (0x2021, "D"),
        (0x2022, "b"),
        (0x2026, "h"),
        (0x2030, "p"),
        (0x2032, "p"),
        (0x2033, "P"),
        (0x2039, "l"),
        (0x203A, "r"),
        (0x203E, "o"),
        (0x2044, "f"),
        (0x20AC, "e"),
        (0x2111, "i"),
        (0x2118, "w"),
        (0x211C, "r"),
        (0x2122, "t"),
        (0x2135, "a"),
        (0x2190, "l"),
        (0x2191, "u"),
        (0x2192, "r"),
        (0x2193, "d"),
        (0x2194, "h"),
        (0x21B5, "c"),
        (0x21D0, "l"),
        (0x21D1, "u"),
        (0x21D2, "r"),
        (0x21D3, "d"),
        (0x21D4, "h"),
        (0x2200, "f"),
        (0x2202, "p"),
        (0x2203, "e"),
        (0x2205, "e"),
        (0x2207, "n"),
        (0x2208, "i"),
        (0x2209, "n"),
        (0x220B, "n"),
        (0x220F, "p"),
        (0x2211, "s"),
        (0x2212, "m"),
        (0x2217, "l"),
        (0x221A, "r"),
        (0x221D, "p"),
        (0x221E, "i"),
        (0x2220, "a"),
        (0x2227, "a"),
        (0x2228, "o"),
        (0x2229, "c"),
        (0x222A, "c"),
        (0x222B, "i"),
        (0x223C, "s"),
        (0x2245, "c"),
        (0x2248, "a"),
        (0x2260, "n"),
        (0x2261, "e"),
        (0x2264, "l"),
        (0x2265, "g"),
        (0x2282, "s"),
        (0x2283, "s"),
        (0x2284, "n"),
        (0x2286, "s"),
        (0x2287, "s"),
        (0x2295, "o"),
        (0x2297, "o"),
        (0x22A5, "p"),
        (0x22C5, "s"),
        (0x2308, "l"),
        (0x2309, "r"),
        (0x230A, "l"),
        (0x230B, "r"),
        (0x2329, "l"),
        (0x232A, "r"),
        (0x25CA, "l"),
        (0x2660, "s"),
        (0x2663, "c"),
        (0x2665, "h"),
        (0x2666, "d"),
    ];
    let kept: &[(u32, &str)] = &[
        (0x0027, "&#039;"),
        (0x00B2, "&sup2;"),
        (0x00B3, "&sup3;"),
        (0x00B9, "&sup1;"),
        (0x00BC, "&frac14;"),
        (0x00BD, "&frac12;"),
        (0x00BE, "&frac34;"),
        (0x2234, "&there4;"),
    ];
    assert_eq!(letters.len() + kept.len(), 253);
    let mut wrong = Vec::new();
    for &(code, expected) in letters.iter().chain(kept) {
        let c = char::from_u32(code).unwrap();
        let got = RateLimiter::clean_rate_limiter_key(&format!("x{c}y"));
        if got != format!("x{expected}y") {
            wrong.push(format!("U+{code:04X} {c:?}: {got:?}, not x{expected}y"));
        }
    }
    for code in 0..0x3_0000_u32 {
        let Some(c) = char::from_u32(code) else {
            continue;
        };
        if letters.iter().chain(kept).any(|&(k, _)| k == code) {
            continue;
        }
        let got = RateLimiter::clean_rate_limiter_key(&format!("x{c}y"));
        if got != format!("x{c}y") {
            wrong.push(format!(
                "U+{code:04X} {c:?} is kept by PHP, cleaned to {got:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
