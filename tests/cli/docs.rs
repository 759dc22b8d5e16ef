//! Docs that match the binary (issue 27 §3): every `llmsurge …` command in the fenced
//! shell blocks of README.md and docs/*.md is run, shortened, and fails this test, named
//! by file and line, when it exits 2 (bad usage or input) or panics.
//!
//! How a command is run:
//! - `benchmark run` in README.md runs for real against an instant mock (its `--target`,
//!   or `LLMSURGE_TARGET`, replaced by the mock's URL; no target stays the built-in
//!   mock), at most 4 requests a benchmark. In docs/*.md it runs with `--dry-run`, which
//!   resolves the whole plan and prepares the data (files included) without load, so the
//!   test stays short on a 2-core CI machine.
//! - `mock-server` starts on port 0 and is stopped once it listens.
//! - Every other subcommand runs as written.
//! - Pipes, redirections and comments end a command (`llmsurge config > x.env` runs
//!   `llmsurge config`); leading `NAME=value` words are its environment.
//!
//! All commands share one working directory, README.md's first, so a command may read
//! what an earlier one wrote (`benchmark from-file runs/today/benchmarks.json`). Data
//! files the docs name are small fixtures (tests/fixtures/docs/) with the columns the
//! docs describe. Markers, an HTML comment on a line before a fence:
//! - `<!-- doc-commands: file NAME -->`: the block is a file's content (a data example);
//!   it is written as NAME in the working directory, so the commands run on it.
//! - `<!-- doc-commands: skip REASON -->`: the block's commands are not run. Kept for
//!   what cannot run here (other hosts' reports, a synopsis).
//!
//! Two rules skip a command, each with a line on stderr: a `--processor` or `--data` that
//! is a Hugging Face id (the test has no network), and a shell variable other than
//! `$URL` (the mock's URL, as the CI example of mock-server.md sets it) and `$START`
//! (an instant two minutes ahead, as multi-host.md sets it).

use crate::support::{llmsurge, mock};
use llmsurge::mock::MockConfig;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Requests per benchmark of a README run.
const CAP: u64 = 4;
/// The longest any one command may take here.
const COMMAND_BOUND: Duration = Duration::from_secs(60);

/// One command of the docs.
#[derive(Debug)]
pub(crate) struct DocCommand {
    /// `docs/cli.md:12`.
    pub(crate) at: String,
    /// As written, continuation lines joined.
    pub(crate) text: String,
    pub(crate) env: Vec<(String, String)>,
    /// Words after `llmsurge`.
    pub(crate) args: Vec<String>,
}

/// What a file's fences hold: commands, and the files its markers name.
#[derive(Debug, Default)]
pub(crate) struct DocFile {
    pub(crate) commands: Vec<DocCommand>,
    pub(crate) files: Vec<(String, String)>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then docs/*.md in name order.
fn doc_paths() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut all = vec![root().join("README.md")];
    all.extend(docs);
    all
}

/// The words of a command line as a shell splits them, cut at the first pipe,
/// redirection, list operator or comment.
fn words(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for w in shlex::split(line)? {
        let ends = ["|", "||", "&&", ";", "&"].contains(&w.as_str())
            || w.starts_with('>')
            || w.starts_with("2>")
            || w.starts_with('#');
        if ends {
            break;
        }
        out.push(w);
    }
    Some(out)
}

/// A doc's commands and files (also read by the sweep page's test, which runs its
/// sweeps for real).
pub(crate) fn parse(path: &Path) -> DocFile {
    let name = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).expect("a doc is readable");
    let lines: Vec<&str> = text.lines().collect();
    let mut doc = DocFile::default();
    let mut marker: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(m) = line
            .strip_prefix("<!-- doc-commands:")
            .and_then(|m| m.strip_suffix("-->"))
        {
            marker = Some(m.trim().to_string());
            i += 1;
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            if !line.is_empty() {
                marker = None; // a marker applies to the fence right after it
            }
            i += 1;
            continue;
        };
        let lang = lang.trim().to_string();
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let body = &lines[start..end];
        i = end + 1;
        match marker.take() {
            Some(m) if m.starts_with("skip") => continue,
            Some(m) if m.starts_with("file ") => {
                let file = m["file ".len()..].trim().to_string();
                doc.files.push((file, body.join("\n") + "\n"));
                continue;
            }
            Some(m) => panic!("{name}:{start}: unknown doc-commands marker {m:?}"),
            None => {}
        }
        if !["sh", "bash", "shell", "console", ""].contains(&lang.as_str()) {
            continue;
        }
        let mut k = 0;
        while k < body.len() {
            let first = k;
            let mut joined = body[k].trim().to_string();
            while joined.ends_with('\\') && k + 1 < body.len() {
                joined.pop();
                k += 1;
                joined.push(' ');
                joined.push_str(body[k].trim());
            }
            k += 1;
            let joined = joined.strip_prefix("$ ").unwrap_or(&joined).to_string();
            let Some(mut w) = words(&joined) else {
                continue;
            };
            let assignments = w
                .iter()
                .take_while(|x| {
                    x.split_once('=').is_some_and(|(n, _)| {
                        !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    })
                })
                .count();
            if w.get(assignments).map(String::as_str) != Some("llmsurge") {
                continue;
            }
            let env = w
                .drain(..assignments)
                .filter_map(|a| a.split_once('=').map(|(n, v)| (n.into(), v.into())))
                .collect();
            doc.commands.push(DocCommand {
                at: format!("{name}:{}", start + first + 1),
                text: joined.clone(),
                env,
                args: w.split_off(1),
            });
        }
    }
    doc
}

/// `--flag value` → `--flag new`, or `--flag=value`; adds `--flag new` when absent.
fn set_flag(args: &mut Vec<String>, flag: &str, new: impl Fn(Option<&str>) -> String) {
    for i in 0..args.len() {
        if args[i] == flag && i + 1 < args.len() {
            args[i + 1] = new(Some(&args[i + 1]));
            return;
        }
        if let Some(v) = args[i].strip_prefix(&format!("{flag}=")) {
            args[i] = format!("{flag}={}", new(Some(v)));
            return;
        }
    }
    args.push(flag.to_string());
    args.push(new(None));
}

/// Runs one command; `Some(problem)` when it exited 2, panicked or hung.
fn check(cmd: &DocCommand, readme: bool, mock_url: &str, dir: &Path) -> Option<String> {
    let mut args = cmd.args.clone();
    let mut env = cmd.env.clone();
    let is = |a: &[String], sub: &[&str]| a.len() >= sub.len() && a[..sub.len()] == *sub;
    if is(&args, &["benchmark", "run"]) {
        if readme {
            if args
                .iter()
                .any(|a| a == "--target" || a.starts_with("--target="))
            {
                set_flag(&mut args, "--target", |_| mock_url.to_string());
            }
            for (name, value) in &mut env {
                if name == "LLMSURGE_TARGET" {
                    *value = mock_url.to_string();
                }
            }
            set_flag(&mut args, "--max-requests", |v| {
                v.and_then(|v| v.parse::<u64>().ok())
                    .map_or(CAP, |n| n.min(CAP))
                    .to_string()
            });
        } else {
            args.push("--dry-run".into());
        }
    }
    let mock_server = is(&args, &["mock-server"]);
    if mock_server {
        set_flag(&mut args, "--port", |_| "0".into());
    }
    // `llmsurge` in a sweep's --serve-cmd is this binary, as on a user's PATH.
    let bin = Path::new(env!("CARGO_BIN_EXE_llmsurge"))
        .parent()
        .expect("the binary's folder");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let mut child = llmsurge()
        .args(&args)
        .envs(env)
        .env("PATH", path)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("llmsurge starts");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let err_reader =
        std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let out_reader = std::thread::spawn(move || {
        // A mock server is done once it says where it listens.
        let mut lines = BufReader::new(stdout).lines();
        if mock_server {
            return lines
                .next()
                .and_then(Result::ok)
                .is_some_and(|l| l.starts_with("listening on"));
        }
        lines.for_each(drop);
        false
    });
    let deadline = Instant::now() + COMMAND_BOUND;
    let status = loop {
        if out_reader.is_finished() && mock_server {
            let _ = child.kill();
        }
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let listened = out_reader.join().unwrap_or(false);
    let stderr = err_reader.join().unwrap_or_default();
    let first = stderr.lines().next().unwrap_or("").to_string();
    let problem = match status.and_then(|s| s.code()) {
        _ if stderr.contains("panicked") => Some(format!("panicked: {stderr}")),
        None if mock_server && listened => None,
        None if status.is_none() => Some(format!("still running after {COMMAND_BOUND:?}")),
        Some(2) => Some(format!("exit 2: {first}")),
        _ => None,
    };
    problem.map(|p| {
        format!(
            "{}: `llmsurge {}` ({}): {p}",
            cmd.at,
            args.join(" "),
            cmd.text
        )
    })
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("a fixture folder") {
        let path = entry.expect("entry").path();
        let dest = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, dest).expect("copy a fixture");
        }
    }
}

/// The skip rules (besides the `skip` marker): a tokenizer or dataset from the Hugging
/// Face Hub (`org/name` that is no file here: the test has no network), and a shell
/// variable the test does not know.
fn skipped(cmd: &DocCommand, vars: &[(&str, String)], dir: &Path) -> Option<String> {
    for (i, w) in cmd.args.iter().enumerate() {
        let hub_flag = i > 0 && ["--processor", "--data"].contains(&cmd.args[i - 1].as_str());
        let hub_id = w.split('/').count() == 2
            && !w.starts_with('.')
            && !w.contains('=')
            && !dir.join(w).exists();
        if hub_flag && hub_id {
            return Some(format!("{w} is a Hugging Face id"));
        }
        let mut rest = w.as_str();
        while let Some(at) = rest.find('$') {
            rest = &rest[at + 1..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !vars.iter().any(|(v, _)| *v == name) {
                return Some(format!("${name} is set by the shell"));
            }
        }
    }
    None
}

/// The command with the shell variables the test knows replaced (the mock's `$URL`, a
/// `$START` two minutes ahead).
fn substitute(cmd: &DocCommand, vars: &[(&str, String)]) -> DocCommand {
    let args = cmd
        .args
        .iter()
        .map(|w| {
            vars.iter().fold(w.clone(), |w, (name, value)| {
                w.replace(&format!("${name}"), value)
            })
        })
        .collect();
    DocCommand {
        at: cmd.at.clone(),
        text: cmd.text.clone(),
        env: cmd.env.clone(),
        args,
    }
}

#[test]
fn every_command_in_the_docs_runs_against_the_mock() {
    let server = mock(MockConfig::instant());
    let url = server.base_url();
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&root().join("tests/fixtures/docs"), dir.path());
    // The TLS section's CA and client certificate: made now, never kept in the repository.
    crate::engine::tls::write_doc_files(dir.path());
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
        + 120;
    let vars = [("URL", url.clone()), ("START", start.to_string())];
    let mut ran = 0;
    let mut problems = Vec::new();
    for path in doc_paths() {
        let doc = parse(&path);
        for (name, content) in &doc.files {
            std::fs::write(dir.path().join(name), content).expect("write a doc's file");
        }
        let readme = path.ends_with("README.md");
        for cmd in &doc.commands {
            if let Some(why) = skipped(cmd, &vars, dir.path()) {
                eprintln!("{}: skipped ({why}): {}", cmd.at, cmd.text);
                continue;
            }
            let cmd = substitute(cmd, &vars);
            ran += 1;
            problems.extend(check(&cmd, readme, &url, dir.path()));
        }
    }
    assert!(ran >= 40, "only {ran} commands found in the docs");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn commands_are_cut_at_pipes_redirections_and_comments() {
    assert_eq!(
        words("llmsurge config > llmsurge.env   # every variable"),
        Some(vec!["llmsurge".into(), "config".into()])
    );
    assert_eq!(
        words(r#"llmsurge benchmark run --slo "ttft_p99<=1s" | head"#),
        Some(vec![
            "llmsurge".into(),
            "benchmark".into(),
            "run".into(),
            "--slo".into(),
            "ttft_p99<=1s".into()
        ])
    );
    let mut args = vec!["--max-requests".to_string(), "1000".to_string()];
    set_flag(&mut args, "--max-requests", |v| {
        v.map_or(CAP, |v| v.parse::<u64>().unwrap_or(CAP).min(CAP))
            .to_string()
    });
    assert_eq!(args, ["--max-requests", "4"]);
}

/// Every subcommand that reads settings, with its path (`benchmark run`).
fn subcommands() -> Vec<(String, clap::Command)> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let p = format!("{path} {}", sub.get_name()).trim().to_string();
            out.push((p.clone(), sub.clone()));
            walk(sub, &p, out);
        }
    }
    use clap::CommandFactory;
    let mut out = Vec::new();
    walk(&llmsurge::cli::Cli::command(), "", &mut out);
    out
}

/// The long flags of a command, `--help` and `--version` aside.
fn flags(cmd: &clap::Command) -> Vec<(String, Option<String>)> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .filter_map(|a| {
            let long = a.get_long()?;
            (!["help", "version"].contains(&long)).then(|| {
                (
                    format!("--{long}"),
                    a.get_env().map(|e| e.to_string_lossy().into_owned()),
                )
            })
        })
        .collect()
}

/// "Every flag has an environment variable" (README, cli.md, `--help`), except those
/// cli.md names: the flags of `k8s job`, which describe the manifest.
#[test]
fn every_flag_has_an_environment_variable() {
    let mut missing = Vec::new();
    for (path, cmd) in subcommands() {
        if path == "k8s job" {
            continue;
        }
        for (flag, env) in flags(&cmd) {
            if env.is_none() {
                missing.push(format!("llmsurge {path} {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "flags without a variable: {missing:?}");
}

/// cli.md lists every flag of `benchmark run`; mock-server.md every flag of the mock.
#[test]
fn every_flag_is_documented() {
    let doc = |name: &str| std::fs::read_to_string(root().join(name)).expect("a doc");
    let (cli, mock_doc) = (doc("docs/cli.md"), doc("docs/mock-server.md"));
    let mut missing = Vec::new();
    for (path, cmd) in subcommands() {
        let page = match path.as_str() {
            "benchmark run" => &cli,
            "mock-server" => &mock_doc,
            _ => continue,
        };
        for (flag, _) in flags(&cmd) {
            let quoted = format!("`{flag}");
            let mentioned = page.match_indices(&quoted).any(|(at, _)| {
                page[at + quoted.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_ascii_alphanumeric() && c != '-')
            });
            if !mentioned {
                missing.push(format!("{path} {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags the docs do not mention: {missing:?}"
    );
}
