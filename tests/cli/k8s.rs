//! `llmsurge k8s job`: the manifest parsed back from its YAML, and its usage errors.

use crate::support::llmsurge;
use serde_json::Value;

/// A fixed generation instant: 2027-01-15T08:00:00Z.
const NOW: &str = "1800000000";

/// What a `k8s job` run printed, and its exit code.
pub(super) struct Output {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// `llmsurge k8s job --now NOW ARGS…`, run to its end.
pub(super) fn k8s_job(args: &[&str]) -> Output {
    let out = llmsurge()
        .args(["k8s", "job", "--now", NOW])
        .args(args)
        .output()
        .expect("llmsurge runs");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The YAML documents of a manifest.
pub(super) fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(yaml).expect("the output is YAML")
}

fn kind<'a>(docs: &'a [Value], kind: &str, component: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind && d["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .unwrap_or_else(|| panic!("no {kind} for {component} in {docs:?}"))
}

/// The (name, value) of a container's plain env entries.
fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

fn assert_usage_error(out: &Output, needle: &str) {
    assert_eq!(out.code, 2, "stderr: {}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {:?}", out.stderr);
    assert!(lines[0].starts_with("error: "), "{}", lines[0]);
    assert!(
        lines[0].contains(needle),
        "{:?} should name {needle:?}",
        lines[0]
    );
    assert!(
        out.stdout.is_empty(),
        "no manifest on error: {}",
        out.stdout
    );
}

#[test]
fn the_manifest_is_an_indexed_job_with_a_shared_start_and_a_merge() {
    let secret_value = "sk-this-must-never-appear";
    let out = llmsurge()
        // The key in the generating shell must not leak into the manifest either.
        .env("LLMSURGE_API_KEY", secret_value)
        .args([
            "k8s",
            "job",
            "--now",
            NOW,
            "--name",
            "bench",
            "--image",
            "reg/llmsurge:1",
        ])
        .args([
            "--shards",
            "4",
            "--namespace",
            "load",
            "--cpu",
            "2",
            "--memory",
            "4Gi",
        ])
        .args([
            "--results-pvc",
            "shared",
            "--api-key-secret",
            "llm-key:token",
            "--",
        ])
        .args([
            "--target",
            "http://vllm:8000",
            "--profile",
            "constant",
            "--rate",
            "100",
        ])
        .args([
            "--max-seconds",
            "60",
            "--outputs",
            "json,html",
            "--stream",
            "false",
        ])
        .output()
        .expect("llmsurge runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(secret_value), "the key leaked: {stdout}");
    assert!(stdout.starts_with("# "), "a header comment first: {stdout}");
    assert!(
        stdout.contains("2027-01-15T08:02:00Z")
            && stdout.contains("apply this manifest before then"),
        "the header names the start instant: {stdout}"
    );

    let docs = documents(&stdout);
    assert_eq!(docs.len(), 2, "an existing claim: no PVC document");
    let job = kind(&docs, "Job", "shard");
    assert_eq!(job["metadata"]["name"], "bench");
    assert_eq!(job["metadata"]["namespace"], "load");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 4);
    assert_eq!(spec["parallelism"], 4);
    assert_eq!(spec["backoffLimit"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "reg/llmsurge:1");
    assert_eq!(c["args"], serde_json::json!(["benchmark", "run"]));
    assert_eq!(env_value(c, "LLMSURGE_SHARDS"), Some("4"));
    // The default delay, 120 s after --now.
    assert_eq!(
        env_value(c, "LLMSURGE_START_AT"),
        Some("2027-01-15T08:02:00Z")
    );
    let dir = env_value(c, "LLMSURGE_OUTPUT_DIR").expect("output dir");
    assert!(
        dir.starts_with("/results/") && dir.ends_with("/shard-$(JOB_COMPLETION_INDEX)"),
        "{dir}"
    );
    // The index is declared before the variable that expands it.
    assert_eq!(c["env"][0]["name"], "JOB_COMPLETION_INDEX");
    // The trailing flags, as their variables (only those typed).
    assert_eq!(env_value(c, "LLMSURGE_TARGET"), Some("http://vllm:8000"));
    assert_eq!(env_value(c, "LLMSURGE_PROFILE"), Some("constant"));
    assert_eq!(env_value(c, "LLMSURGE_RATE"), Some("100"));
    assert_eq!(env_value(c, "LLMSURGE_MAX_SECONDS"), Some("60"));
    assert_eq!(env_value(c, "LLMSURGE_OUTPUTS"), Some("json,html"));
    assert_eq!(env_value(c, "LLMSURGE_STREAM"), Some("false"));
    assert_eq!(env_value(c, "LLMSURGE_REQUEST_TIMEOUT"), None);
    // The key by reference only.
    let key = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "LLMSURGE_API_KEY")
        .expect("the key's variable");
    assert_eq!(key["value"], Value::Null);
    assert_eq!(key["valueFrom"]["secretKeyRef"]["name"], "llm-key");
    assert_eq!(key["valueFrom"]["secretKeyRef"]["key"], "token");
    assert_eq!(c["resources"]["requests"]["cpu"], "2");
    assert_eq!(c["resources"]["limits"]["memory"], "4Gi");
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "shared"
    );
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/results");

    // The merge Job waits for the four reports of this run's directory, then merges them.
    let merge = kind(&docs, "Job", "merge");
    assert_eq!(merge["metadata"]["name"], "bench-merge");
    let run_dir = dir.trim_end_matches("/shard-$(JOB_COMPLETION_INDEX)");
    let mpod = &merge["spec"]["template"]["spec"];
    let wait = &mpod["initContainers"][0];
    assert_eq!(env_value(wait, "SHARDS"), Some("4"));
    assert_eq!(env_value(wait, "DIR"), Some(run_dir));
    let args: Vec<&str> = mpod["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut expected = vec!["benchmark".to_string(), "merge".to_string()];
    expected.extend((0..4).map(|k| format!("{run_dir}/shard-{k}/benchmarks.json")));
    expected.extend(["--output-dir".to_string(), format!("{run_dir}/merged")]);
    assert_eq!(args, expected);
}

#[test]
fn without_a_claim_the_manifest_creates_one_and_is_reproducible() {
    let args = [
        "--image",
        "llmsurge:dev",
        "--start-delay",
        "5m",
        "--",
        "--max-seconds",
        "30",
    ];
    let first = k8s_job(&args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        k8s_job(&args).stdout,
        first.stdout,
        "same inputs, same bytes"
    );
    let docs = documents(&first.stdout);
    assert_eq!(docs.len(), 3);
    let pvc = kind(&docs, "PersistentVolumeClaim", "results");
    assert_eq!(pvc["metadata"]["name"], "llmsurge-results");
    assert_eq!(pvc["spec"]["accessModes"][0], "ReadWriteMany");
    let job = kind(&docs, "Job", "shard");
    assert_eq!(job["spec"]["completions"], 2);
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_value(c, "LLMSURGE_START_AT"),
        Some("2027-01-15T08:05:00Z")
    );
    assert_eq!(env_value(c, "LLMSURGE_MAX_SECONDS"), Some("30"));
}

#[test]
fn bad_names_and_flags_are_one_line_usage_errors() {
    assert_usage_error(
        &k8s_job(&["--image", "i", "--name", "Bad_Name"]),
        "Bad_Name",
    );
    assert_usage_error(
        &k8s_job(&["--image", "i", "--namespace", "Team_A"]),
        "--namespace",
    );
    assert_usage_error(&k8s_job(&["--image", "i", "--cpu", "2 cores"]), "--cpu");
    assert_usage_error(&k8s_job(&["--name", "x"]), "--image");
    // A run flag that does not exist, and one the pods must not get.
    assert_usage_error(
        &k8s_job(&["--image", "i", "--", "--no-such-flag"]),
        "--no-such-flag",
    );
    assert_usage_error(&k8s_job(&["--image", "i", "--", "--dry-run"]), "--dry-run");
    // A bad value is caught by the run's own parser, here and not in the pods.
    assert_usage_error(
        &k8s_job(&["--image", "i", "--", "--max-seconds", "soon"]),
        "--max-seconds",
    );
    // Managed by this command.
    assert_usage_error(
        &k8s_job(&["--image", "i", "--", "--output-dir", "/x"]),
        "--output-dir",
    );
    // The merge needs the JSON report.
    assert_usage_error(
        &k8s_job(&["--image", "i", "--", "--outputs", "html"]),
        "--outputs",
    );
    // Adaptive profiles are not split.
    assert_usage_error(
        &k8s_job(&["--image", "i", "--", "--profile", "sweep"]),
        "sweep",
    );
    // A password in the metrics URL would be written into the manifest.
    let out = k8s_job(&[
        "--image",
        "i",
        "--",
        "--server-metrics",
        "http://u:sk-url-secret@vllm:8000/metrics",
    ]);
    assert_usage_error(&out, "--server-metrics");
    assert!(!out.stderr.contains("sk-url-secret"), "{}", out.stderr);
}

#[test]
fn a_key_is_never_written_inline() {
    let key = "sk-inline-secret-value";
    let out = k8s_job(&["--image", "i", "--", "--api-key", key]);
    assert_usage_error(&out, "--api-key-secret");
    assert!(!out.stderr.contains(key), "{}", out.stderr);
    let out = k8s_job(&[
        "--image",
        "i",
        "--",
        "--backend-kwargs",
        &format!(r#"{{"headers": {{"Authorization": "Bearer {key}"}}}}"#),
    ]);
    assert_usage_error(&out, "Authorization");
    assert!(!out.stderr.contains(key), "{}", out.stderr);
}

#[test]
fn headers_come_from_a_secret_and_only_harmless_values_are_written() {
    let key = "sk-gateway-secret-value";
    let kwargs = format!(
        r#"{{"headers": {{"X-Gateway-Key": "{key}", "Ocp-Apim-Subscription-Key": "{key}", "Accept": "text/event-stream"}}}}"#
    );
    let out = k8s_job(&[
        "--image",
        "i",
        "--header-secret",
        "llm-headers",
        "--",
        "--target",
        "http://vllm:8000",
        "--backend-kwargs",
        &kwargs,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stdout.contains(key), "{}", out.stdout);
    let docs = documents(&out.stdout);
    let c = &kind(&docs, "Job", "shard")["spec"]["template"]["spec"]["containers"][0];
    let env = c["env"].as_array().expect("env");
    let position = |name: &str| env.iter().position(|e| e["name"] == name);
    // Each hidden header is a variable read from the Secret, keyed by its lowercase name.
    let mut vars = Vec::new();
    for header in ["ocp-apim-subscription-key", "x-gateway-key"] {
        let entry = env
            .iter()
            .find(|e| e["valueFrom"]["secretKeyRef"]["key"] == header)
            .unwrap_or_else(|| panic!("no variable from the Secret for {header}: {env:?}"));
        assert_eq!(entry["valueFrom"]["secretKeyRef"]["name"], "llm-headers");
        let var = entry["name"].as_str().expect("a name").to_string();
        assert!(
            !var.starts_with("LLMSURGE_"),
            "llmsurge refuses unknown LLMSURGE_ names"
        );
        assert!(
            position(&var) < position("LLMSURGE_BACKEND_KWARGS"),
            "declared before use"
        );
        vars.push((header, var));
    }
    // The kwargs refer to them; Kubernetes expands $(VAR) when it starts the pod.
    let kwargs: Value =
        serde_json::from_str(env_value(c, "LLMSURGE_BACKEND_KWARGS").expect("the kwargs variable"))
            .expect("JSON");
    for (header, var) in &vars {
        let name = if *header == "x-gateway-key" {
            "X-Gateway-Key"
        } else {
            "Ocp-Apim-Subscription-Key"
        };
        assert_eq!(kwargs["headers"][name], format!("$({var})"));
    }
    assert_eq!(kwargs["headers"]["Accept"], "text/event-stream");

    // Without the Secret: refused, naming the header and the key to put in it.
    let out = k8s_job(&["--image", "i", "--", "--backend-kwargs", &kwargs_with(key)]);
    assert_usage_error(&out, "--header-secret");
    assert!(!out.stderr.contains(key), "{}", out.stderr);
    // A Secret nothing needs is a flag without effect.
    assert_usage_error(
        &k8s_job(&[
            "--image",
            "i",
            "--header-secret",
            "llm-headers",
            "--",
            "--rate",
            "1",
        ]),
        "--header-secret",
    );
    // URLs carrying credentials and query values, and query parameters, are refused.
    for run_args in [
        vec!["--target".to_string(), format!("http://u:{key}@vllm:8000")],
        vec![
            "--target".to_string(),
            format!("http://vllm:8000/?key={key}"),
        ],
        vec![
            "--backend-kwargs".to_string(),
            format!(r#"{{"params": {{"code": "{key}"}}}}"#),
        ],
    ] {
        let mut args = vec!["--image", "i", "--"];
        args.extend(run_args.iter().map(String::as_str));
        let out = k8s_job(&args);
        assert_eq!(out.code, 2, "{run_args:?}: {}", out.stderr);
        assert!(!out.stderr.contains(key), "{}", out.stderr);
    }
    // A query value opted in is harmless and written.
    let out = k8s_job(&[
        "--image",
        "i",
        "--",
        "--target",
        "http://vllm:8000/?api-version=2024-10-21",
        "--show-query-param",
        "api-version",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("api-version=2024-10-21"),
        "{}",
        out.stdout
    );
}

fn kwargs_with(key: &str) -> String {
    format!(r#"{{"headers": {{"X-Gateway-Key": "{key}"}}}}"#)
}

#[test]
fn a_ca_bundle_comes_from_a_secret_mounted_into_the_shards() {
    let out = k8s_job(&[
        "--image",
        "i",
        "--ca-secret",
        "gateway-ca:bundle.pem",
        "--",
        "--target",
        "https://llm.example:8443",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let docs = documents(&out.stdout);
    let pod = &kind(&docs, "Job", "shard")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let ca = env_value(container, "LLMSURGE_CA_CERT").expect("the CA flag is set");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "ca")
        .expect("the CA is mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "ca")
        .expect("a CA volume");
    assert_eq!(volume["secret"]["secretName"], "gateway-ca");
    let item = &volume["secret"]["items"][0];
    assert_eq!(item["key"], "bundle.pem");
    // The flag names the file the Secret's key becomes.
    let file = format!(
        "{}/{}",
        mount["mountPath"].as_str().expect("a path"),
        item["path"].as_str().expect("a path")
    );
    assert_eq!(ca, file);
    // The merge Job reads only reports: it does not depend on the Secret.
    let merge = &kind(&docs, "Job", "merge")["spec"]["template"]["spec"];
    assert!(!merge["volumes"].to_string().contains("gateway-ca"));

    // The key defaults to ca.crt.
    let out = k8s_job(&["--image", "i", "--ca-secret", "gateway-ca"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("key: ca.crt"), "{}", out.stdout);

    // A host path of --ca-cert means nothing in the pods.
    let out = k8s_job(&[
        "--image",
        "i",
        "--ca-secret",
        "gateway-ca",
        "--",
        "--ca-cert",
        "/tmp/ca.pem",
    ]);
    assert_usage_error(&out, "--ca-secret");
}
