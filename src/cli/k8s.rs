//! `llmsurge k8s job`: a ready Kubernetes manifest that runs one `benchmark run` as N
//! shards of an Indexed Job, all starting at one shared instant, and a second Job that
//! merges their reports (see docs/multi-host.md).
//!
//! The trailing `benchmark run` flags are parsed with the real `benchmark run` definition
//! and each becomes the environment variable clap reads for it, so this module keeps no
//! table of flags of its own. The manifest is built as JSON values and serialized by the
//! YAML crate; only the header comment is text.

use super::usage_error;
use crate::exit_codes;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, Subcommand};
use serde_json::{Value, json};
use std::time::Duration;

/// Where every pod mounts the results volume.
const RESULTS_MOUNT: &str = "/results";
/// Where `--ca-secret`'s bundle is mounted in the shard pods.
const CA_MOUNT: &str = "/etc/llmsurge/ca";
/// The bundle's file name under [`CA_MOUNT`].
const CA_FILE: &str = "ca.pem";
/// The variable the Job controller fills with each pod's index (0..N).
const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// Variables this command sets itself; a trailing flag that maps to one is refused.
/// The shard names are those of issue 14 (`--shard`, `--shards`, `--start-at`).
const MANAGED_ENV: &[(&str, &str)] = &[
    (
        "LLMSURGE_SHARD",
        "each pod's shard comes from --shards and JOB_COMPLETION_INDEX",
    ),
    ("LLMSURGE_SHARDS", "use `k8s job --shards N`"),
    ("LLMSURGE_START_AT", "use `k8s job --start-delay DURATION`"),
    (OUTPUT_DIR_ENV, "each shard writes under the results volume"),
];
const SHARDS_ENV: &str = "LLMSURGE_SHARDS";
const START_AT_ENV: &str = "LLMSURGE_START_AT";
const OUTPUT_DIR_ENV: &str = "LLMSURGE_OUTPUT_DIR";
/// The longest Job name: the merge Job (`-merge`) and the results claim (`-results`) add
/// their suffixes and must stay within a 63-character label.
const MAX_NAME: usize = 55;

/// `llmsurge k8s …` subcommands.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Print a Kubernetes Indexed Job (N shards of `benchmark run` with one start instant)
    /// and a Job that merges their reports, as multi-document YAML on stdout.
    Job(JobArgs),
}

/// Flags of `llmsurge k8s job`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example: llmsurge k8s job --image registry.example/llmsurge:0.1 --shards 4 \\\n  --api-key-secret llm-key -- --target http://vllm:8000 --profile constant --rate 200 --max-seconds 300 \\\n  | kubectl apply -f -"
)]
pub struct JobArgs {
    /// Name of the Job (a DNS-1123 label, at most 55 characters); the merge Job is NAME-merge.
    #[arg(long, default_value = "llmsurge", value_parser = parse_name)]
    pub name: String,

    /// Container image with `llmsurge` on its PATH (required). The repository's
    /// Containerfile builds one: `podman build -t REGISTRY/llmsurge:TAG -f Containerfile .`,
    /// then push it where the cluster pulls from (docs/multi-host.md).
    #[arg(long)]
    pub image: Option<String>,

    /// Number of shards: pods of the Indexed Job (parallelism = completions = N).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "N")]
    pub shards: u32,

    /// Namespace of every object (default: the one kubectl uses).
    #[arg(long, value_parser = parse_name)]
    pub namespace: Option<String>,

    /// CPU for each shard pod, as request and limit (a Kubernetes quantity: 2, 500m).
    #[arg(long, value_parser = parse_quantity, value_name = "QUANTITY")]
    pub cpu: Option<String>,

    /// Memory for each shard pod, as request and limit (a Kubernetes quantity: 4Gi).
    #[arg(long, value_parser = parse_quantity, value_name = "QUANTITY")]
    pub memory: Option<String>,

    /// An existing ReadWriteMany PersistentVolumeClaim for the reports, mounted at
    /// /results. Default: the manifest also creates NAME-results.
    #[arg(long, value_parser = parse_subdomain, value_name = "NAME")]
    pub results_pvc: Option<String>,

    /// Size of the claim created when --results-pvc is not given.
    #[arg(
        long,
        default_value = "10Gi",
        value_parser = parse_quantity,
        value_name = "QUANTITY"
    )]
    pub results_size: String,

    /// The shards start this long after the manifest is generated: apply it before then.
    #[arg(long, default_value = "120s", value_parser = super::values::parse_duration, value_name = "DURATION")]
    pub start_delay: Duration,

    /// The Kubernetes Secret (and key, default `api-key`) holding the target's API key;
    /// pods read it by reference, the key never enters the manifest.
    #[arg(long, value_parser = parse_secret_ref, value_name = "NAME[:KEY]")]
    pub api_key_secret: Option<SecretRef>,

    /// The Kubernetes Secret (and key, default `ca.crt`) holding the PEM bundle of the CA
    /// that signed the target's certificate: mounted read-only into every pod at
    /// /etc/llmsurge/ca, and --ca-cert set to it (LLMSURGE_CA_CERT).
    #[arg(long, value_parser = parse_ca_secret_ref, value_name = "NAME[:KEY]")]
    pub ca_secret: Option<SecretRef>,

    /// The Kubernetes Secret holding the values of the --backend-kwargs headers, one key
    /// per header named as the header in lowercase (e.g. x-gateway-key). Pods read them
    /// by reference; no header value but the harmless ones and those of --show-header
    /// enters the manifest.
    #[arg(long, value_parser = parse_subdomain, value_name = "NAME")]
    pub header_secret: Option<String>,

    /// How long the merge Job waits for all N reports before it fails.
    #[arg(long, default_value = "6h", value_parser = super::values::parse_positive_duration, value_name = "DURATION")]
    pub merge_timeout: Duration,

    /// Image with a POSIX shell for the merge Job's wait (the llmsurge image needs none).
    #[arg(long, default_value = "busybox:1.37", value_name = "IMAGE")]
    pub wait_image: String,

    /// Generation instant in Unix seconds instead of the clock (reproducible output).
    #[arg(long, hide = true, value_name = "UNIX_SECONDS")]
    pub now: Option<f64>,

    /// `benchmark run` flags, after `--`: each becomes its LLMSURGE_* variable in the pods.
    #[arg(last = true, value_name = "BENCHMARK_RUN_FLAGS")]
    pub run_args: Vec<String>,
}

/// A reference to one key of a Kubernetes Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The key inside it.
    pub key: String,
}

/// Runs `llmsurge k8s …`; returns the exit code.
pub fn k8s(command: &K8sCommand) -> i32 {
    match command {
        K8sCommand::Job(args) => {
            let now = match args.now {
                Some(t) if t.is_finite() && t >= 0.0 => t,
                Some(t) => return usage_error(&format!("--now {t}: not a Unix time")),
                None => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
            };
            match render(args, now) {
                Ok(text) => {
                    if let Some(warning) = key_left_behind(args) {
                        crate::stdout::eprintln(&format!("warning: {warning}"));
                    }
                    crate::stdout::print(&text);
                    exit_codes::OK
                }
                Err(message) => usage_error(&message),
            }
        }
    }
}

/// A key in this shell that the pods will not get: the manifest never carries one, so
/// without `--api-key-secret` every request of theirs goes without it (401s).
fn key_left_behind(args: &JobArgs) -> Option<String> {
    if args.api_key_secret.is_some() || sends_its_own_key(args) {
        return None;
    }
    let var = ["LLMSURGE_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .find(|v| std::env::var_os(v).is_some_and(|k| !k.is_empty()))?;
    let origin = super::origin::Origin::Env(var.into());
    Some(format!(
        "{} holds an API key that will not reach the pods (the manifest never carries a key): pass --api-key-secret NAME[:KEY], a Kubernetes Secret holding it",
        origin.describe()
    ))
}

/// Whether the pods send a key of their own: an `Authorization` (or Anthropic's
/// `x-api-key`) header read from `--header-secret`.
fn sends_its_own_key(args: &JobArgs) -> bool {
    run_env_with_secrets(&args.run_args, args.shards, args.header_secret.as_deref()).is_ok_and(
        |env| {
            env.secret_headers
                .iter()
                .any(|(_, _, key)| key == "authorization" || key == "x-api-key")
        },
    )
}

/// The whole output: header comment and YAML documents.
pub fn render(args: &JobArgs, now: f64) -> Result<String, String> {
    // Checked here rather than by clap, whose message would not fit on one line.
    let image = args
        .image
        .as_deref()
        .filter(|i| !i.trim().is_empty())
        .ok_or("--image is required: a container image with llmsurge on its PATH")?;
    let env = run_env_with_secrets(&args.run_args, args.shards, args.header_secret.as_deref())?;
    // Both would reach every pod, whose run refuses a key beside an Authorization header.
    if args.api_key_secret.is_some()
        && env
            .secret_headers
            .iter()
            .any(|(_, _, key)| key == "authorization")
    {
        return Err(
            "--api-key-secret and the Authorization header of --backend-kwargs both give the pods a key, and every pod's run would refuse the pair: keep one".into(),
        );
    }
    if args.ca_secret.is_some() && env.plain.iter().any(|(n, _)| n == "LLMSURGE_CA_CERT") {
        return Err(
            "--ca-secret and --ca-cert both name the CA bundle: keep --ca-secret (a path of this host means nothing in the pods)"
                .into(),
        );
    }
    // Whole seconds: every pod reads the same instant, and the text is stable.
    let start = (now + args.start_delay.as_secs_f64()).ceil();
    let docs = manifest(args, image, &env, start);
    let yaml = serde_saphyr::to_string_multiple(&docs)
        .map_err(|e| format!("cannot write the manifest as YAML: {e}"))?;
    let pvc = claim_name(args);
    let run_dir = run_dir(args, start);
    let header = [
        format!(
            "# llmsurge {} k8s job: {} shard(s) of `llmsurge benchmark run` (Indexed Job {}), then {}-merge.",
            env!("CARGO_PKG_VERSION"),
            args.shards,
            args.name,
            args.name
        ),
        format!(
            "# Every shard starts at {} (generated {}): apply this manifest before then, or regenerate it.",
            rfc3339(start),
            rfc3339(now.floor())
        ),
        "# Client clocks must be NTP-synchronised: the shards agree on the start instant only through them.".into(),
        format!(
            "# Reports: claim {pvc} (ReadWriteMany), {run_dir}/shard-K/benchmarks.json, merged into {run_dir}/merged/."
        ),
        "# A failed shard is not retried (backoffLimit 0): a retry would start after the others.".into(),
    ];
    Ok(format!("{}\n{yaml}", header.join("\n")))
}

/// The claim the reports go to.
fn claim_name(args: &JobArgs) -> String {
    args.results_pvc
        .clone()
        .unwrap_or_else(|| format!("{}-results", args.name))
}

/// This run's directory on the volume: named after the Job and its start instant, so a
/// claim reused by a later run never mixes in an earlier run's reports.
fn run_dir(args: &JobArgs, start: f64) -> String {
    let stamp: String = rfc3339(start)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    format!("{RESULTS_MOUNT}/{}-{stamp}", args.name)
}

/// The documents: the results claim (unless one was given), the shard Job, the merge Job.
fn manifest(args: &JobArgs, image: &str, run_env: &RunEnv, start: f64) -> Vec<Value> {
    let n = args.shards;
    let pvc = claim_name(args);
    let dir = run_dir(args, start);
    let metadata = |name: String, component: &str| {
        let mut m = json!({
            "name": name,
            "labels": labels(args, component),
        });
        if let Some(ns) = &args.namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let volume_mounts = json!([{ "name": "results", "mountPath": RESULTS_MOUNT }]);
    let volumes = json!([{ "name": "results", "persistentVolumeClaim": { "claimName": pvc } }]);
    // The shards also mount the CA bundle; the merge Job needs only the reports.
    let (mut shard_mounts, mut shard_volumes) = (volume_mounts.clone(), volumes.clone());
    if let Some(ca) = &args.ca_secret
        && let (Some(mounts), Some(vols)) =
            (shard_mounts.as_array_mut(), shard_volumes.as_array_mut())
    {
        mounts.push(json!({ "name": "ca", "mountPath": CA_MOUNT, "readOnly": true }));
        vols.push(json!({
            "name": "ca",
            "secret": { "secretName": ca.name, "items": [{ "key": ca.key, "path": CA_FILE }] },
        }));
    }

    let mut env = vec![
        // Declared first so the `$(JOB_COMPLETION_INDEX)` below can refer to it (a
        // variable may only use those listed before it); the controller then adds none.
        json!({
            "name": INDEX_ENV,
            "valueFrom": { "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            } },
        }),
        json!({ "name": SHARDS_ENV, "value": n.to_string() }),
        json!({ "name": START_AT_ENV, "value": rfc3339(start) }),
        json!({ "name": OUTPUT_DIR_ENV, "value": format!("{dir}/shard-$({INDEX_ENV})") }),
    ];
    if args.ca_secret.is_some() {
        env.push(json!({ "name": "LLMSURGE_CA_CERT", "value": format!("{CA_MOUNT}/{CA_FILE}") }));
    }
    if let Some(secret) = &args.api_key_secret {
        env.push(json!({
            "name": api_key_env(),
            "valueFrom": { "secretKeyRef": { "name": secret.name, "key": secret.key } },
        }));
    }
    // Before the variables that refer to them as $(NAME): Kubernetes expands only those
    // listed earlier.
    env.extend(run_env.secret_headers.iter().map(|(var, secret, key)| {
        json!({
            "name": var,
            "valueFrom": { "secretKeyRef": { "name": secret, "key": key } },
        })
    }));
    env.extend(
        run_env
            .plain
            .iter()
            .map(|(name, value)| json!({ "name": name, "value": value })),
    );
    let mut shard = json!({
        "name": "llmsurge",
        "image": image,
        "command": ["llmsurge"],
        "args": ["benchmark", "run"],
        "env": env,
        "volumeMounts": shard_mounts,
    });
    let mut quantities = serde_json::Map::new();
    if let Some(cpu) = &args.cpu {
        quantities.insert("cpu".into(), json!(cpu));
    }
    if let Some(memory) = &args.memory {
        quantities.insert("memory".into(), json!(memory));
    }
    if !quantities.is_empty() {
        // Requests equal to limits: a Guaranteed pod, whose CPU is not taken away mid-run.
        shard["resources"] = json!({ "requests": quantities, "limits": quantities });
    }

    let mut docs = Vec::new();
    if args.results_pvc.is_none() {
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": metadata(pvc.clone(), "results"),
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": { "requests": { "storage": args.results_size } },
            },
        }));
    }
    docs.push(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(args.name.clone(), "shard"),
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels(args, "shard") },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [shard],
                    "volumes": shard_volumes,
                },
            },
        },
    }));

    let mut merge_args = vec!["benchmark".to_string(), "merge".to_string()];
    merge_args.extend((0..n).map(|k| format!("{dir}/shard-{k}/benchmarks.json")));
    merge_args.extend(["--output-dir".to_string(), format!("{dir}/merged")]);
    docs.push(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(format!("{}-merge", args.name), "merge"),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels(args, "merge") },
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [{
                        "name": "wait-for-shards",
                        "image": args.wait_image,
                        "command": ["sh", "-c", WAIT_SCRIPT],
                        "env": [
                            { "name": "DIR", "value": dir },
                            { "name": "SHARDS", "value": n.to_string() },
                            { "name": "TIMEOUT_S", "value": args.merge_timeout.as_secs().to_string() },
                        ],
                        "volumeMounts": volume_mounts,
                    }],
                    "containers": [{
                        "name": "merge",
                        "image": image,
                        "command": ["llmsurge"],
                        "args": merge_args,
                        "volumeMounts": volume_mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }));
    docs
}

/// The merge Job's wait: until every shard's report exists (reports are renamed into
/// place whole), polling every 10 s, at most TIMEOUT_S.
const WAIT_SCRIPT: &str = r#"deadline=$(( $(date +%s) + TIMEOUT_S ))
while :; do
  found=0; k=0
  while [ "$k" -lt "$SHARDS" ]; do
    [ -s "$DIR/shard-$k/benchmarks.json" ] && found=$((found + 1))
    k=$((k + 1))
  done
  if [ "$found" -ge "$SHARDS" ]; then echo "all $SHARDS shard reports are in $DIR"; exit 0; fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "gave up after ${TIMEOUT_S}s: $found of $SHARDS shard reports in $DIR (merge by hand with --allow-partial)" >&2
    exit 1
  fi
  sleep 10
done
"#;

fn labels(args: &JobArgs, component: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "llmsurge",
        "app.kubernetes.io/instance": args.name,
        "app.kubernetes.io/component": component,
    })
}

/// The `benchmark run` definition, as the binary parses it.
fn run_command() -> Result<clap::Command, String> {
    super::negative_numbers_are_values(super::Cli::command())
        .find_subcommand("benchmark")
        .and_then(|b| b.find_subcommand("run"))
        .cloned()
        .ok_or_else(|| "internal: no `benchmark run` command".to_string())
}

/// The variable `--api-key` reads, from its definition.
fn api_key_env() -> String {
    run_command()
        .ok()
        .and_then(|run| {
            run.get_arguments()
                .find(|a| a.get_id() == "api_key")
                .and_then(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "LLMSURGE_API_KEY".into())
}

/// The shard pods' environment from the trailing `benchmark run` flags.
#[derive(Debug, Default)]
pub struct RunEnv {
    /// (variable, value) pairs, in definition order; header values that are not shown
    /// are `$(VAR)` references to [`Self::secret_headers`].
    pub plain: Vec<(String, String)>,
    /// (variable, Secret name, key) of each header value read from `--header-secret`.
    pub secret_headers: Vec<(String, String, String)>,
}

/// The variable a pod reads the `i`th secret header into (not `LLMSURGE_*`: llmsurge
/// refuses variables it does not know).
fn secret_header_var(i: usize) -> String {
    format!("K8S_HEADER_SECRET_{i}")
}

/// [`run_env`], checked for secrets: no value of a flag may carry one into the manifest
/// (a URL's user, password or query values, an API key), and every header of
/// `--backend-kwargs` that outputs would redact is read from `header_secret` instead.
pub fn run_env_with_secrets(
    run_args: &[String],
    shards: u32,
    header_secret: Option<&str>,
) -> Result<RunEnv, String> {
    let plain = run_env(run_args, shards)?;
    let list = |env: &str| -> Vec<String> {
        plain
            .iter()
            .filter(|(n, _)| n == env)
            .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    // The pods' own opt-ins decide what may be written, as they decide their reports.
    let redaction = llmsurge_proto::Redaction::new(
        list("LLMSURGE_SHOW_HEADER"),
        list("LLMSURGE_SHOW_QUERY_PARAM"),
    );
    let mut out = RunEnv::default();
    for (env, value) in plain {
        if env != "LLMSURGE_BACKEND_KWARGS" {
            if redaction.text(&value) != value {
                let flag = flag_of(&env);
                return Err(format!(
                    "{flag} would put the user, password or query values of its URL in the manifest: send credentials in a header read from a Secret (--header-secret), or show a harmless query value with --show-query-param NAME"
                ));
            }
            out.plain.push((env, value));
            continue;
        }
        let Ok(Value::Object(mut kwargs)) = serde_json::from_str::<Value>(&value) else {
            // The run's own parser gives the precise message; the pod would only fail.
            return Err("--backend-kwargs: not a JSON object".into());
        };
        if let Some(Value::Object(params)) = kwargs.get("params")
            && let Some(name) = params.keys().find(|n| !redaction.shows_query_param(n))
        {
            return Err(format!(
                "--backend-kwargs params.{name} would be written into the manifest: send a credential in a header read from a Secret (--header-secret), or show a harmless value with --show-query-param {name}"
            ));
        }
        if let Some(Value::Object(headers)) = kwargs.get_mut("headers") {
            for (name, v) in headers.iter_mut() {
                if redaction.shows_header(name) {
                    continue;
                }
                let Some(secret) = header_secret else {
                    return Err(format!(
                        "--backend-kwargs carries the header {name:?}, whose value would be written into the manifest: use --header-secret NAME (a Secret with the key {:?}) or, for the API key, --api-key-secret NAME[:KEY]",
                        name.to_ascii_lowercase()
                    ));
                };
                let key = name.to_ascii_lowercase();
                if !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
                {
                    return Err(format!(
                        "--header-secret: the header {name:?} is not a valid Secret key (letters, digits, '-', '_' and '.')"
                    ));
                }
                let var = secret_header_var(out.secret_headers.len());
                *v = Value::String(format!("$({var})"));
                out.secret_headers.push((var, secret.to_string(), key));
            }
        }
        out.plain.push((env, Value::Object(kwargs).to_string()));
    }
    if header_secret.is_some() && out.secret_headers.is_empty() {
        return Err(
            "--header-secret has no effect: no header of --backend-kwargs after -- needs it".into(),
        );
    }
    Ok(out)
}

/// The flag of a `benchmark run` variable, for messages.
fn flag_of(env: &str) -> String {
    run_command()
        .ok()
        .and_then(|run| {
            run.get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == env))
                .and_then(|a| a.get_long().map(|l| format!("--{l}")))
        })
        .unwrap_or_else(|| env.to_string())
}

/// The trailing `benchmark run` flags as (variable, value) pairs, in definition order.
pub fn run_env(run_args: &[String], shards: u32) -> Result<Vec<(String, String)>, String> {
    let run = run_command()?;
    let matches = run
        .clone()
        .no_binary_name(true)
        .try_get_matches_from(run_args)
        .map_err(|e| {
            // Rendered as a top-level error is: clap's hints and a peer's flag kept.
            let line = super::clap_line::one_line(&e);
            match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    "after --: `benchmark run` flags for the pods, not --help or --version"
                        .to_string()
                }
                _ => format!("after -- (benchmark run flags): {line}"),
            }
        })?;
    let mut out = Vec::new();
    for arg in run.get_arguments() {
        let id = arg.get_id().as_str();
        // Only what was typed: the local environment and defaults are not the pods'.
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let flag = arg
            .get_long()
            .map_or_else(|| id.to_string(), |l| format!("--{l}"));
        let Some(env) = arg.get_env() else {
            return Err(format!(
                "{flag} has no environment variable, so it cannot reach the pods (drop it after --)"
            ));
        };
        let env = env.to_string_lossy().into_owned();
        if let Some((_, why)) = MANAGED_ENV.iter().find(|(name, _)| *name == env) {
            return Err(format!("{flag} is set by `llmsurge k8s job`: {why}"));
        }
        if super::config::is_secret(arg, &env) {
            return Err(format!(
                "{flag} would put a secret in the manifest: use --api-key-secret NAME[:KEY] (a Kubernetes Secret)"
            ));
        }
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|values| values.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let value = match arg.get_value_delimiter() {
            Some(d) => raw.join(&d.to_string()),
            None if raw.len() <= 1 => raw.into_iter().next().unwrap_or_else(|| "true".into()),
            None => {
                return Err(format!(
                    "{flag} is given {} times but {env} holds one value",
                    raw.len()
                ));
            }
        };
        check_value(id, &flag, &value, shards)?;
        out.push((env, value));
    }
    Ok(out)
}

/// What a shard pod could not do with a value that is valid on one host.
fn check_value(id: &str, flag: &str, value: &str, shards: u32) -> Result<(), String> {
    match id {
        // The merge Job reads each shard's benchmarks.json.
        "outputs"
            if !value
                .split(',')
                .any(|o| matches!(o.trim(), "json" | "benchmarks.json")) =>
        {
            return Err(format!(
                "{flag} {value}: the merge needs each shard's benchmarks.json; add json"
            ));
        }
        // The pods would only print their plan and send nothing.
        "dry_run" => {
            return Err(format!(
                "{flag} would make every pod print its plan and send nothing: check the plan with `llmsurge benchmark run {flag} …` here"
            ));
        }
        "profile" if shards > 1 && matches!(value, "sweep" | "capacity" | "synchronous") => {
            return Err(format!(
                "{flag} {value} cannot be split across {shards} shards (see docs/multi-host.md); use --shards 1 or another profile"
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Whole Unix seconds as RFC 3339 UTC (`2026-11-25T09:21:00Z`).
fn rfc3339(unix: f64) -> String {
    chrono::DateTime::from_timestamp(unix as i64, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// A DNS-1123 label of at most [`MAX_NAME`] characters (Job and namespace names).
fn parse_name(s: &str) -> Result<String, String> {
    let ok_chars = s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if s.is_empty() || !ok_chars || !ends || s.len() > MAX_NAME {
        return Err(format!(
            "{s:?} is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most {MAX_NAME} characters)"
        ));
    }
    Ok(s.to_string())
}

/// A DNS-1123 subdomain (claim and Secret names): labels joined by '.', at most 253.
fn parse_subdomain(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !ok {
        return Err(format!(
            "{s:?} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
        ));
    }
    Ok(s.to_string())
}

/// `NAME[:KEY]`: a Secret name and a key of it (default `api-key`).
fn parse_secret_ref(s: &str) -> Result<SecretRef, String> {
    secret_ref(s, "api-key")
}

/// `NAME[:KEY]` of `--ca-secret`: the key defaults to `ca.crt`, where cert-manager and
/// most tools put a CA bundle.
fn parse_ca_secret_ref(s: &str) -> Result<SecretRef, String> {
    secret_ref(s, "ca.crt")
}

fn secret_ref(s: &str, default_key: &str) -> Result<SecretRef, String> {
    let (name, key) = s.split_once(':').unwrap_or((s, default_key));
    let name = parse_subdomain(name)?;
    let key_ok = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !key_ok {
        return Err(format!(
            "{key:?} is not a Secret key (letters, digits, '-', '_' and '.')"
        ));
    }
    Ok(SecretRef {
        name,
        key: key.to_string(),
    })
}

/// A Kubernetes quantity: a decimal number with an optional suffix (`500m`, `2`, `4Gi`).
fn parse_quantity(s: &str) -> Result<String, String> {
    let number = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &s[number.len()..];
    let number_ok = !number.is_empty()
        && number.chars().filter(|c| *c == '.').count() <= 1
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.chars().any(|c| c.is_ascii_digit());
    const SUFFIXES: &[&str] = &[
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if !number_ok || !SUFFIXES.contains(&suffix) {
        return Err(format!(
            "{s:?} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi)"
        ));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_variables_are_the_ones_clap_reads() {
        let run = run_command().expect("run");
        let output_dir = run
            .get_arguments()
            .find(|a| a.get_id() == "output_dir")
            .and_then(|a| a.get_env())
            .expect("--output-dir has a variable");
        assert_eq!(output_dir, OUTPUT_DIR_ENV);
        assert_eq!(api_key_env(), "LLMSURGE_API_KEY");
    }

    #[test]
    fn names_follow_dns_1123() {
        assert!(parse_name("bench-1").is_ok());
        for bad in ["", "Bench", "-a", "a-", "a_b", "a.b", &"a".repeat(56)] {
            assert!(parse_name(bad).is_err(), "{bad:?}");
        }
        assert!(parse_subdomain("results.team-a").is_ok());
        assert!(parse_subdomain("a..b").is_err());
    }

    #[test]
    fn secret_refs_default_their_key() {
        let r = parse_secret_ref("llm-key").expect("valid");
        assert_eq!((r.name.as_str(), r.key.as_str()), ("llm-key", "api-key"));
        let r = parse_secret_ref("llm-key:token").expect("valid");
        assert_eq!(r.key, "token");
        assert!(parse_secret_ref("llm-key:").is_err());
        assert!(parse_secret_ref("LLM:key").is_err());
    }

    #[test]
    fn quantities() {
        for ok in ["2", "500m", "1.5", "4Gi", "512Mi"] {
            assert!(parse_quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["", "m", "2 cores", "4GB", "1.2.3", "-1"] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339_spelling() {
        assert_eq!(rfc3339(1_800_000_000.0), "2027-01-15T08:00:00Z");
    }

    #[test]
    fn typed_flags_become_their_variables() {
        let args: Vec<String> = [
            "--target",
            "http://vllm:8000",
            "--outputs",
            "json,html",
            "--http2",
            "--stream",
            "false",
        ]
        .map(String::from)
        .to_vec();
        let env = run_env(&args, 2).expect("valid");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("LLMSURGE_TARGET"), Some("http://vllm:8000"));
        assert_eq!(get("LLMSURGE_OUTPUTS"), Some("json,html"));
        assert_eq!(get("LLMSURGE_HTTP2"), Some("true"));
        assert_eq!(get("LLMSURGE_STREAM"), Some("false"));
        // Defaults stay out: the pod's llmsurge has the same ones.
        assert_eq!(get("LLMSURGE_REQUEST_TIMEOUT"), None);
    }
}
