//! `llmsurge config` as a user runs it: counts with TOKEN in their names are settings to
//! show, credentials (by exact name) are not.

use crate::support::llmsurge;

#[test]
fn config_shows_token_counts_and_hides_the_api_key() {
    let key = "sk-config-e2e-secret";
    let out = llmsurge()
        .arg("config")
        .env("LLMSURGE_MOCK_OUTPUT_TOKENS", "77")
        .env("LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN", "0.5")
        .env("LLMSURGE_MOCK_KV_CACHE_TOKENS", "4096")
        .env("LLMSURGE_API_KEY", key)
        .env("OPENAI_API_KEY", key)
        .output()
        .expect("llmsurge runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in [
        "LLMSURGE_MOCK_OUTPUT_TOKENS=77",
        "LLMSURGE_MOCK_TTFT_MS_PER_PROMPT_TOKEN=0.5",
        "LLMSURGE_MOCK_KV_CACHE_TOKENS=4096",
        "# LLMSURGE_API_KEY=<set in the environment; redacted>",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line} is not a line of:\n{stdout}"
        );
    }
    assert!(!stdout.contains(key) && !stderr.contains(key), "{stdout}");
}

/// A variable a run would refuse is an error of `config` too (exit 2, the variable and
/// its flag named on stderr), with the block still printed so the rest can be read.
#[test]
fn config_names_a_variable_its_flag_refuses() {
    let out = llmsurge()
        .arg("config")
        .env("LLMSURGE_HTTP2_STREAMS", "0")
        .env("LLMSURGE_MAX_SECONDS", "10s")
        .output()
        .expect("llmsurge runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].starts_with("error: LLMSURGE_HTTP2_STREAMS=0 is refused: ")
            && errors[0].contains("--http2-streams"),
        "{stderr}"
    );
    assert!(
        stdout.lines().any(|l| l == "LLMSURGE_MAX_SECONDS=10s"),
        "{stdout}"
    );
}

/// A value that is not UTF-8 is refused as a run refuses it, not shown as unset; a
/// password typed with a space in a URL is not shown, and its line sets nothing.
#[test]
fn config_refuses_a_value_that_is_not_utf8_and_hides_typed_passwords() {
    use std::os::unix::ffi::OsStrExt;
    let out = llmsurge()
        .arg("config")
        .env("LLMSURGE_HTTP2", std::ffi::OsStr::from_bytes(b"\xff"))
        .env("LLMSURGE_TARGET", "http://u:pw SECRET-e2e@127.0.0.1:1")
        .output()
        .expect("llmsurge runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l == "error: LLMSURGE_HTTP2 is refused: its value is not valid UTF-8"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("SECRET-e2e") && !stderr.contains("SECRET-e2e"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("# LLMSURGE_TARGET='http://<redacted>@127.0.0.1:1'")),
        "{stdout}"
    );
}
