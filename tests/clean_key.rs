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
