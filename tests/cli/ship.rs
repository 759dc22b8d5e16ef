//! What can be checked of the shipping files without a container engine or a tag: the
//! Containerfile builds the `dist` profile and copies the binary that profile makes, runs
//! as a non-root user, and its entrypoint runs the real binary (as `llmsurge k8s job`'s
//! pods call it); the release workflow builds the same profile for both targets.

use crate::support::llmsurge;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One instruction: its keyword (upper case) and the rest of the line.
type Instruction = (String, String);

/// The Containerfile's stages, each its `FROM` line's rest and its instructions
/// (continuation lines joined, comments left out).
fn stages(text: &str) -> Vec<(String, Vec<Instruction>)> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(t);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages: Vec<(String, Vec<Instruction>)> = Vec::new();
    for line in lines.iter().filter(|l| !l.is_empty()) {
        let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let keyword = keyword.to_ascii_uppercase();
        let rest = rest.trim().to_string();
        if keyword == "FROM" {
            stages.push((rest, Vec::new()));
        } else {
            let (_, instructions) = stages
                .last_mut()
                .unwrap_or_else(|| panic!("{keyword} before any FROM"));
            instructions.push((keyword, rest));
        }
    }
    stages
}

fn last<'a>(instructions: &'a [Instruction], keyword: &str) -> Option<&'a str> {
    instructions
        .iter()
        .rev()
        .find(|(k, _)| k == keyword)
        .map(|(_, v)| v.as_str())
}

/// Whether Cargo.toml declares `[profile.NAME]`.
fn has_profile(name: &str) -> bool {
    read("Cargo.toml")
        .lines()
        .any(|l| l.trim() == format!("[profile.{name}]"))
}

#[test]
fn the_containerfile_ships_the_dist_binary_as_a_non_root_entrypoint() {
    let text = read("Containerfile");
    let stages = stages(&text);
    assert!(stages.len() >= 2, "a build stage and a runtime stage");
    assert!(has_profile("dist"), "Cargo.toml has no [profile.dist]");

    // The build stage: `cargo build --profile dist` in its WORKDIR.
    let (from, build) = &stages[0];
    let (_, stage_name) = from
        .rsplit_once(" AS ")
        .or_else(|| from.rsplit_once(" as "))
        .unwrap_or_else(|| panic!("the build stage is named: FROM {from}"));
    let workdir = last(build, "WORKDIR").expect("the build stage's WORKDIR");
    let cargo = build
        .iter()
        .find(|(k, v)| k == "RUN" && v.contains("cargo build"))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>())
        .expect("the build stage runs cargo build");
    assert!(
        cargo.windows(2).any(|w| w == ["--profile", "dist"]),
        "{cargo:?}"
    );
    assert!(
        !build
            .iter()
            .any(|(k, v)| k == "ENV" && v.contains("CARGO_TARGET_DIR")),
        "the binary is in target/, where the COPY reads it"
    );

    // The runtime stage copies exactly what that profile builds: cargo writes a custom
    // profile's outputs to target/<profile>/.
    let (base, runtime) = stages.last().expect("a runtime stage");
    assert!(
        base.contains("distroless") || base.contains("slim"),
        "a small runtime image: {base}"
    );
    let copy = runtime
        .iter()
        .find(|(k, v)| k == "COPY" && v.starts_with("--from="))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>())
        .expect("the runtime stage copies from the build stage");
    assert_eq!(copy.len(), 3, "COPY --from=STAGE SRC DEST: {copy:?}");
    assert_eq!(copy[0], format!("--from={}", stage_name.trim()));
    let built = Path::new(workdir).join("target/dist/llmsurge");
    assert_eq!(Path::new(copy[1]), built, "the dist profile's binary");
    let installed = copy[2];
    // The binary the tests run is the package's `llmsurge` binary: the one named here.
    let exe = Path::new(env!("CARGO_BIN_EXE_llmsurge"));
    assert_eq!(exe.file_name(), Path::new(installed).file_name());

    // Non-root: the last USER of the runtime stage is neither root nor uid 0.
    let user = last(runtime, "USER").expect("the runtime stage sets USER");
    let name = user.split(':').next().unwrap_or(user);
    assert!(
        !["root", "0"].contains(&name),
        "the image runs as root: USER {user}"
    );

    // The entrypoint: JSON exec form, the installed binary, args that the real binary
    // takes (with --help, and the CMD's default).
    let entrypoint: Vec<String> =
        serde_json::from_str(last(runtime, "ENTRYPOINT").expect("an ENTRYPOINT"))
            .expect("ENTRYPOINT in exec form, a JSON list");
    assert_eq!(entrypoint.first().map(String::as_str), Some(installed));
    let cmd: Vec<String> = last(runtime, "CMD")
        .map(|c| serde_json::from_str(c).expect("CMD in exec form, a JSON list"))
        .unwrap_or_default();
    for args in [vec!["--help".to_string()], vec!["--version".into()], cmd] {
        let out = llmsurge()
            .args(&entrypoint[1..])
            .args(&args)
            .output()
            .expect("llmsurge runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{entrypoint:?} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // `llmsurge k8s job`'s pods run `llmsurge` by name: the install directory is on the
    // image's PATH.
    let path = last(runtime, "ENV")
        .and_then(|e| e.strip_prefix("PATH="))
        .expect("the runtime stage sets PATH");
    let dir = Path::new(installed).parent().expect("a directory");
    assert!(path.split(':').any(|p| Path::new(p) == dir), "PATH={path}");
    let out = super::k8s::k8s_job(&[
        "--image",
        "llmsurge:test",
        "--",
        "--target",
        "http://vllm:8000",
        "--max-seconds",
        "10",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let docs = super::k8s::documents(&out.stdout);
    let mut commands = 0;
    for doc in &docs {
        let pod = &doc["spec"]["template"]["spec"];
        for container in pod["containers"].as_array().into_iter().flatten() {
            if container["image"] == "llmsurge:test" {
                let command = container["command"][0].as_str().expect("a command");
                assert_eq!(
                    Some(command),
                    Path::new(installed).file_name().and_then(|n| n.to_str())
                );
                commands += 1;
            }
        }
    }
    assert_eq!(
        commands, 2,
        "the shard and merge containers: {}",
        out.stdout
    );

    // The build context leaves the build outputs out (target/ holds gigabytes).
    let ignore = read(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "/target"), "{ignore}");
}

#[test]
fn the_release_workflow_builds_dist_for_both_linux_targets_with_checksums() {
    let text = read(".github/workflows/release.yml");
    let workflow: serde_json::Value = serde_saphyr::from_str(&text).expect("valid YAML");
    assert_eq!(
        workflow["on"]["push"]["tags"],
        serde_json::json!(["v*"]),
        "{workflow}"
    );
    let targets: Vec<&str> = workflow["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_array()
        .expect("a matrix of targets")
        .iter()
        .filter_map(|t| t["target"].as_str())
        .collect();
    assert_eq!(
        targets,
        ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]
    );
    assert!(
        text.contains("cargo build --locked --profile dist"),
        "{text}"
    );
    assert!(text.contains("target/dist/llmsurge"), "{text}");
    assert!(text.contains("sha256sum llmsurge-* > SHA256SUMS"), "{text}");
    assert!(has_profile("dist"));
}
