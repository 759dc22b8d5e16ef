//! Issue 27 §2: output into a pipe whose reader has gone (`llmsurge … | head`) ends
//! quietly, with the command's own exit code, never a panic with a backtrace.

use crate::support::llmsurge;

/// Runs `args` with stdout a pipe whose read end is already closed: the first write
/// fails with EPIPE, exactly as after `head` has read its lines and exited.
fn into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = llmsurge()
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("llmsurge runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_closed_pipe_ends_every_printing_subcommand_quietly() {
    for args in [
        &["benchmark", "run", "--dry-run"][..],
        &["config"],
        &["completions", "bash"],
        &["k8s", "job", "--image", "llmsurge:1", "--shards", "2"],
    ] {
        let (code, stderr) = into_closed_pipe(args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}
