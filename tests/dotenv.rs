//! `.env` read as a Laravel application's phpdotenv v5 reads it: quotes,
//! comments, `${NAME}` and a bare `$`, repeated names, multi-line values,
//! the process environment's precedence, and the refusals of lines that do
//! not parse, which name the line's variable and never show a value.
//!
//! No test here sets a variable of its own process: `.env` is loaded in a
//! process of its own (this test binary again, in a directory of its own).

#![cfg(feature = "redis")]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::process::Command;

use suprnova::bootstrap::BootPlan;
use suprnova::config::{Env, load_dotenv};

// ---- .env, loaded in a process of its own ------------------------------------

/// Set in the environment of a process that runs one test of this binary
/// again, to boot from the `.env` of its working directory.
const CHILD: &str = "SUPRNOVA_DOTENV_CHILD";

/// The start of each line a child prints about its boot.
const MARK: &str = "BOOT.";

/// In a child process: loads `.env` and reads the process environment, as
/// `bootstrap_from_env` does, prints what it read, and says so; elsewhere
/// `false`.
fn child_prints_its_boot() -> bool {
    if std::env::var_os(CHILD).is_none() {
        return false;
    }
    let loaded = std::panic::catch_unwind(load_dotenv);
    let Ok(loaded) = loaded else {
        println!("{MARK}panicked=1");
        return true;
    };
    let plan = loaded
        .map_err(|e| e.to_string())
        .and_then(|_| BootPlan::from_env(&Env::process()).map_err(|e| e.to_string()));
    match plan {
        Ok(plan) => {
            println!("{MARK}environment={}", plan.environment);
            println!("{MARK}driver={}", plan.driver.name());
            println!("{MARK}trusted_proxies={}", plan.trusted_proxies);
            println!("{MARK}cache_prefix={:?}", plan.cache.cache_prefix);
            println!("{MARK}redis_prefix={:?}", plan.cache.redis_prefix);
            println!(
                "{MARK}cache_nodes={:?}",
                plan.cache.redis.as_ref().map(|r| r.nodes().to_vec())
            );
        }
        Err(refused) => println!("{MARK}refused={refused:?}"),
    }
    true
}

/// Runs test `name` of this binary again in a process whose working
/// directory holds `dotenv` as its `.env` and whose environment holds only
/// `vars`, and returns what it printed about its boot: `refused` (the
/// refusal, quoted) or the fields of the plan.
fn boot_in_child(name: &str, dotenv: &[u8], vars: &[(&str, &OsStr)]) -> HashMap<String, String> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "suprnova-dotenv-{}-{name}-{run}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".env"), dotenv).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env_clear()
        .env(CHILD, "1")
        .current_dir(&dir);
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && out.contains("1 passed"),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let fields: HashMap<String, String> = out
        .lines()
        .filter_map(|line| line.find(MARK).map(|at| &line[at + MARK.len()..]))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(!fields.is_empty(), "{out}");
    fields
}

/// The fields of a boot that went through; panics on a refusal.
fn booted(fields: &HashMap<String, String>) -> &HashMap<String, String> {
    assert!(
        !fields.contains_key("refused"),
        "refused: {}",
        fields["refused"]
    );
    fields
}

/// Comments, `export`, both quotes, an inline comment, CRLF line ends and a
/// byte order mark are read as a Laravel application's `.env` reads them.
#[test]
fn env_file_forms_a_laravel_application_writes_are_read_as_it_reads_them() {
    if child_prints_its_boot() {
        return;
    }
    let mut dotenv = b"\xEF\xBB\xBF# a comment\r\n".to_vec();
    dotenv.extend_from_slice(
        b"export APP_ENV=local\r\n\
          APP_TRUSTED_PROXIES=\"10.0.0.5, 2400:cb00::/32\" # the proxies\r\n\
          CACHE_PREFIX='shop_cache_'\r\n\
          APP_NAME=Shop\r\n\
          REDIS_PREFIX=\"${APP_NAME}_db_\"\r\n\
          RATE_LIMIT_DRIVER=memory\r\n",
    );
    let fields = boot_in_child(
        "env_file_forms_a_laravel_application_writes_are_read_as_it_reads_them",
        &dotenv,
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(fields["environment"], "local");
    assert_eq!(fields["driver"], "memory");
    assert_eq!(fields["trusted_proxies"], "10.0.0.5,2400:cb00::/32");
    assert_eq!(fields["cache_prefix"], "\"shop_cache_\"");
    assert_eq!(fields["redis_prefix"], "\"Shop_db_\"");
}

/// An operator who copies `.env.example` (which sets every variable, most of
/// them blank) and appends the settings of the deployment at the end gets
/// the appended settings, as Laravel's phpdotenv gives the last of a
/// repeated key; not the blank line of the example, which leaves every
/// client behind the proxy in one bucket without a word.
#[test]
fn a_setting_appended_to_a_copy_of_env_example_is_not_dropped() {
    if child_prints_its_boot() {
        return;
    }
    let name = "a_setting_appended_to_a_copy_of_env_example_is_not_dropped";
    let example = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example"));
    assert!(example.contains("\nAPP_TRUSTED_PROXIES=\n"));
    for (appended, wanted) in [
        ("APP_TRUSTED_PROXIES=10.0.0.5\n", "10.0.0.5"),
        (
            "APP_TRUSTED_PROXIES=10.0.0.5\nAPP_TRUSTED_PROXIES=10.0.0.6\n",
            "10.0.0.6",
        ),
    ] {
        let dotenv = format!("{example}\n{appended}");
        let fields = boot_in_child(name, dotenv.as_bytes(), &[]);
        assert_eq!(booted(&fields)["trusted_proxies"], wanted, "{appended:?}");
    }
}

/// A `$` that starts no `${NAME}` is a character like any other, in a
/// password as in a prefix: Laravel's phpdotenv replaces `${NAME}` only,
/// so a Laravel application sharing the Redis reads these values as
/// written.
#[test]
fn a_dollar_sign_in_an_env_value_is_kept_as_written() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_dollar_sign_in_an_env_value_is_kept_as_written",
        b"APP_ENV=local\n\
          CACHE_STORE=redis\n\
          REDIS_HOST=cache.internal\n\
          REDIS_PASSWORD=pa$word\n\
          CACHE_PREFIX=shop$1_cache_\n\
          REDIS_PREFIX=\"db$_\"\n",
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(fields["cache_prefix"], "\"shop$1_cache_\"");
    assert_eq!(fields["redis_prefix"], "\"db$_\"");
    // The password is in the URL as written, `$` bare or encoded.
    let nodes = &fields["cache_nodes"];
    assert!(
        nodes.contains("://:pa$word@cache.internal:6379/1")
            || nodes.contains("://:pa%24word@cache.internal:6379/1"),
        "{nodes}"
    );
}

/// "Variables already set in the process win over the file", and a process
/// value that is not UTF-8 "is never read as unset": it refuses boot,
/// naming the variable, whatever `.env` says.
#[cfg(unix)]
#[test]
fn a_process_variable_wins_over_env_even_when_it_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    if child_prints_its_boot() {
        return;
    }
    let name = "a_process_variable_wins_over_env_even_when_it_is_not_utf8";
    let dotenv = b"APP_ENV=local\nAPP_TRUSTED_PROXIES=10.0.0.9\n";

    let fields = boot_in_child(name, dotenv, &[("APP_ENV", OsStr::new("staging"))]);
    assert_eq!(booted(&fields)["environment"], "staging");
    assert_eq!(fields["trusted_proxies"], "10.0.0.9");

    // Set empty in the process, it is set: the file does not fill it in.
    let fields = boot_in_child(name, dotenv, &[("APP_TRUSTED_PROXIES", OsStr::new(""))]);
    assert_eq!(booted(&fields)["trusted_proxies"], "none");

    let fields = boot_in_child(
        name,
        dotenv,
        &[(
            "APP_TRUSTED_PROXIES",
            OsStr::from_bytes(b"10.0.0.5,\xa0192.0.2.10"),
        )],
    );
    let expected = "APP_TRUSTED_PROXIES=\"10.0.0.5,\u{FFFD}192.0.2.10\" is invalid: it holds bytes that are not UTF-8 (each shown as \u{FFFD}); write the value in UTF-8";
    assert_eq!(
        fields.get("refused").map(String::as_str),
        Some(format!("{expected:?}").as_str()),
        "booted on the file's value instead: {fields:?}"
    );
}

/// A line of `.env` that does not parse refuses boot, and the refusal names
/// the variable on that line and does not show the value, which may be a
/// password.
#[test]
fn an_env_line_that_does_not_parse_is_refused_naming_its_variable_without_its_value() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "an_env_line_that_does_not_parse_is_refused_naming_its_variable_without_its_value",
        b"APP_ENV=local\nREDIS_PASSWORD=hunter2 and more\n",
        &[],
    );
    let refused = fields
        .get("refused")
        .expect("a line that does not parse booted");
    assert!(refused.contains("REDIS_PASSWORD"), "{refused}");
    assert!(!refused.contains("hunter2"), "{refused}");
    assert_eq!(
        refused,
        "\"could not load .env: line 2, REDIS_PASSWORD: unexpected whitespace; quote a value that holds spaces (the value is not shown)\""
    );
}

/// A quote left open on one line of `.env` refuses boot naming that line's
/// variable, and the refusal shows none of the lines after it.
#[test]
fn an_unclosed_quote_in_env_does_not_print_the_lines_after_it() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "an_unclosed_quote_in_env_does_not_print_the_lines_after_it",
        b"APP_ENV=local\nAPP_NAME=\"My Shop\nCACHE_STORE=redis\nREDIS_PASSWORD=hunter2\n",
        &[],
    );
    let refused = fields.get("refused").expect("an unclosed quote booted");
    assert!(!refused.contains("hunter2"), "{refused}");
    assert!(refused.contains("APP_NAME"), "{refused}");
    assert_eq!(
        refused,
        "\"could not load .env: line 2, APP_NAME: a missing closing quote; close the quote the value opens (the value is not shown)\""
    );
}

/// A NUL byte in a value of `.env` (a file damaged by a copy, or saved in
/// another encoding) refuses boot naming the variable; it does not panic,
/// and the panic's message does not show the value.
#[test]
fn a_nul_byte_in_an_env_value_is_refused_not_a_panic() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_nul_byte_in_an_env_value_is_refused_not_a_panic",
        b"APP_ENV=local\nREDIS_PASSWORD=hunter2\0\n",
        &[],
    );
    assert!(!fields.contains_key("panicked"), "loading .env panicked");
    let refused = fields.get("refused").expect("a NUL byte booted");
    assert!(refused.contains("REDIS_PASSWORD"), "{refused}");
    assert!(!refused.contains("hunter2"), "{refused}");
    assert_eq!(
        refused,
        "\"could not load .env: line 2, REDIS_PASSWORD: a NUL byte, which no environment variable can hold (the value is not shown)\""
    );
}

/// A double-quoted value that does not close on its line goes on over the
/// next lines, joined with a newline, a line that looks like a comment
/// included; the escapes of double quotes are read in it.
#[test]
fn a_double_quoted_value_goes_on_over_the_lines_until_its_quote_closes() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_double_quoted_value_goes_on_over_the_lines_until_its_quote_closes",
        b"APP_ENV=local\n\
          CACHE_PREFIX=\"first\\tline\n\
          # not a comment\n\
          last\"\n\
          REDIS_PREFIX=db_\n",
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(
        fields["cache_prefix"],
        "\"first\\tline\\n# not a comment\\nlast\""
    );
    assert_eq!(fields["redis_prefix"], "\"db_\"");
}

/// A `#` right after an unquoted value starts a comment, as it does after a
/// space.
#[test]
fn a_hash_right_after_an_unquoted_value_starts_a_comment() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_hash_right_after_an_unquoted_value_starts_a_comment",
        b"APP_ENV=local\nCACHE_PREFIX=shop_#the cache\nREDIS_PREFIX=db_ # the database\n",
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(fields["cache_prefix"], "\"shop_\"");
    assert_eq!(fields["redis_prefix"], "\"db_\"");
}

/// In double quotes `\$` is a `$` that starts no `${NAME}`; outside quotes
/// a backslash is a character like any other.
#[test]
fn an_escaped_dollar_sign_is_not_substituted() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "an_escaped_dollar_sign_is_not_substituted",
        b"APP_ENV=local\n\
          APP_NAME=Shop\n\
          REDIS_PREFIX=\"db\\${APP_NAME}_\"\n\
          CACHE_PREFIX=c\\$1_\n",
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(fields["redis_prefix"], "\"db${APP_NAME}_\"");
    assert_eq!(fields["cache_prefix"], "\"c\\\\$1_\"");
}

/// `${NAME}` of a variable that neither the process nor an earlier line
/// sets stays as written.
#[test]
fn a_reference_to_an_undefined_variable_is_kept_as_written() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_reference_to_an_undefined_variable_is_kept_as_written",
        b"APP_ENV=local\n\
          CACHE_PREFIX=${UNDEFINED}_cache_\n\
          REDIS_PREFIX=\"${LATER}_db_\"\n\
          LATER=x\n",
        &[],
    );
    let fields = booted(&fields);
    assert_eq!(fields["cache_prefix"], "\"${UNDEFINED}_cache_\"");
    assert_eq!(fields["redis_prefix"], "\"${LATER}_db_\"");
}

/// `${NAME}` is replaced by the process environment's value, else by an
/// earlier line's; a process value wins over the file's own line of that
/// name even when it is not UTF-8, which no value read here can take in:
/// the line that refers to it is refused, naming it, and the file's line
/// is not taken instead.
#[cfg(unix)]
#[test]
fn a_reference_to_a_process_variable_that_is_not_utf8_does_not_take_the_files_value() {
    use std::os::unix::ffi::OsStrExt;
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_reference_to_a_process_variable_that_is_not_utf8_does_not_take_the_files_value",
        b"APP_ENV=local\nEDGE=10.0.0.5\nAPP_TRUSTED_PROXIES=${EDGE}\n",
        &[("EDGE", OsStr::from_bytes(b"10.0.0.6\xa0"))],
    );
    assert_eq!(
        fields.get("refused").map(String::as_str),
        Some(
            "\"could not load .env: line 3, APP_TRUSTED_PROXIES: a `${NAME}` of a variable \
             whose value in the process is not UTF-8; set it in UTF-8 (the value is not \
             shown)\""
        ),
        "{fields:?}"
    );
}

/// The same reference to a process variable that is UTF-8 takes the
/// process's value over the file's line.
#[test]
fn a_reference_takes_the_process_value_over_the_files_line() {
    if child_prints_its_boot() {
        return;
    }
    let fields = boot_in_child(
        "a_reference_takes_the_process_value_over_the_files_line",
        b"APP_ENV=local\nEDGE=10.0.0.5\nAPP_TRUSTED_PROXIES=\"${EDGE},192.0.2.1\"\n",
        &[("EDGE", OsStr::new("10.0.0.6"))],
    );
    assert_eq!(
        fields.get("trusted_proxies").map(String::as_str),
        Some("10.0.0.6,192.0.2.1"),
        "{fields:?}"
    );
}
