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
