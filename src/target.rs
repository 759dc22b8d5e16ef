//! Target resolution, before any worker is spawned: start the in-process mock when asked,
//! check `GET /health` (or `--health-path`; advisory), list `GET /v1/models`, and pick the
//! model. Every check carries the target's credentials and headers
//! ([`llmsurge_proto::credentials`]), as the benchmark's requests do.

use crate::cli::resolve::{TargetSpec, UsageError};
use crate::cli::values::HealthPath;
use crate::mock::{MockConfig, MockServer};
use llmsurge_proto::{RequestFormat, Secret, inert, limits};
use std::time::Duration;

/// The most of the served models' names an error message shows.
const SERVED_LIST_SHOWN: usize = 1 << 10;

/// A reachable target and the model to use.
#[derive(Debug)]
pub struct ResolvedTarget {
    /// Base URL, without `/v1`.
    pub base_url: String,
    /// The model every request names.
    pub model: String,
    /// Models the server lists (empty when it does not list them).
    pub models: Vec<String>,
    /// The `GET /v1/models` answer parsed, with its `server` header, or why there is
    /// none: the server's fingerprint reads it rather than asking again.
    pub model_list: Result<(serde_json::Value, Option<String>), String>,
    /// The in-process mock server, kept alive for the run.
    pub mock: Option<MockServer>,
    /// What the check found that does not stop the run (an unhealthy `/health` on a
    /// server that lists its models), one line each, without the `warning: ` prefix.
    pub warnings: Vec<String>,
}

/// How the target is checked: what each check carries and where readiness is asked.
#[derive(Debug)]
pub struct TargetCheck<'a> {
    /// The API spoken (it names the API key's header).
    pub request_format: RequestFormat,
    /// `--api-key`.
    pub api_key: Option<&'a Secret>,
    /// `--backend-kwargs` headers.
    pub headers: &'a [(String, String)],
    /// `--backend-kwargs` query parameters.
    pub params: &'a [(String, String)],
    /// `--health-path`.
    pub health: &'a HealthPath,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// The run's TLS settings.
    pub tls: &'a llmsurge_proto::http::TlsConfig,
    /// `--http2`: h2c with prior knowledge on `http://`.
    pub http2: bool,
    /// Where the flags the messages advise are given: `None` on `benchmark run`'s own
    /// line; `Some("after --")` for a sweep, whose points take them after `--`.
    pub flags_where: Option<&'a str>,
}

impl TargetCheck<'_> {
    /// `flag` as the messages advise it: `--api-key`, or `--api-key after --`.
    fn flag(&self, flag: &str) -> String {
        match self.flags_where {
            Some(w) => format!("{flag} {w}"),
            None => flag.to_string(),
        }
    }
}

/// What one check of a target found.
struct Checked {
    model: String,
    models: Vec<String>,
    model_list: Result<(serde_json::Value, Option<String>), String>,
    warnings: Vec<String>,
}

#[derive(serde::Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(serde::Deserialize)]
struct ModelEntry {
    id: String,
}

/// The URL of `path` (e.g. `/v1/models`) at the server of `base_url`: the path appended
/// to the base's path, the base's query (an Azure `api-version`, a gateway's key) kept.
pub fn endpoint(base_url: &str, path: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(mut url) if url.query().is_some() => {
            let joined = format!("{}{path}", url.path().trim_end_matches('/'));
            url.set_path(&joined);
            url.to_string()
        }
        _ => format!("{}{path}", base_url.trim_end_matches('/')),
    }
}

/// The first pause between two checks of a target that is not ready yet.
const READY_BACKOFF_FIRST: Duration = Duration::from_millis(250);
/// The longest pause between two checks.
const READY_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Resolves the target; every failure is a one-line usage error naming the target. With
/// `ready_timeout`, a target that is not ready (unreachable, unhealthy without a usable
/// model list, no model listed) is checked again with backoff (0.25 s doubling to 5 s)
/// until it is or the time is up; then the last failure is the error. `--target mock`
/// also serves `extra_models` (the models of a `--lora` split).
pub async fn resolve_target(
    spec: &TargetSpec,
    extra_models: &[&str],
    model: Option<&str>,
    target: &TargetCheck<'_>,
    ready_timeout: Option<Duration>,
) -> Result<ResolvedTarget, UsageError> {
    let (base_url, mock) = match spec {
        TargetSpec::Mock => {
            let mut config =
                MockConfig::from_env().map_err(|e| UsageError(format!("--target mock: {e}")))?;
            for m in extra_models {
                if !config.model.iter().any(|s| s == m) {
                    config.model.push((*m).to_string());
                }
            }
            let server =
                MockServer::start(config).map_err(|e| UsageError(format!("--target mock: {e}")))?;
            (server.base_url(), Some(server))
        }
        TargetSpec::Url(url) => (url.clone(), None),
    };
    let client = llmsurge_proto::http::client_builder(&base_url, target.tls)
        .map_err(|e| UsageError(e.to_string()))
        .map(|b| llmsurge_proto::http::http2_when(b, target.http2))?
        .connect_timeout(target.connect_timeout)
        .timeout(target.connect_timeout + Duration::from_secs(10))
        .build()
        .map_err(|e| UsageError(format!("cannot build an HTTP client: {e}")))?;
    let Some(timeout) = ready_timeout else {
        let c = check(&client, &base_url, model, target).await?;
        return Ok(ResolvedTarget {
            base_url,
            model: c.model,
            models: c.models,
            model_list: c.model_list,
            mock,
            warnings: c.warnings,
        });
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = READY_BACKOFF_FIRST;
    let mut announced = false;
    loop {
        let error = match check(&client, &base_url, model, target).await {
            Ok(c) => {
                return Ok(ResolvedTarget {
                    base_url,
                    model: c.model,
                    models: c.models,
                    model_list: c.model_list,
                    mock,
                    warnings: c.warnings,
                });
            }
            Err(e) => e,
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(error);
        }
        if !announced {
            announced = true;
            // The error already shows the URL redacted.
            crate::stdout::eprintln(&format!(
                "waiting for the target to be ready (--ready-timeout {}s): {}",
                timeout.as_secs_f64(),
                error.0
            ));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(READY_BACKOFF_MAX);
    }
}

/// `--http2` on `https://`: what the server chose by ALPN when it is not `h2`, from a
/// handshake of the worker's own TLS client (reqwest offering only `h2` speaks it even
/// when the server chose nothing, and then fails in ways that do not say why). `None`
/// when it chose `h2`, or when no handshake completed: the check that follows names that.
async fn alpn_without_h2(base_url: &str, target: &TargetCheck<'_>) -> Option<String> {
    use llmsurge_worker::tls_conn::{Tls, client_config, server_name};
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    let config = client_config(target.tls, true).ok()?;
    let mut tls = Tls::new(&config, server_name(host).ok()?).ok()?;
    let handshake = async {
        let stream = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .ok()?;
        tls.handshake(&stream).await.ok()
    };
    tokio::time::timeout(target.connect_timeout, handshake)
        .await
        .ok()??;
    match tls.alpn_protocol() {
        Some(b"h2") => None,
        Some(other) => Some(format!("{:?}", String::from_utf8_lossy(other))),
        None => Some("no protocol".into()),
    }
}

/// The URL of `path` at the target, with the user's query parameters and without the
/// base's user and password (the credentials' Basic header carries them): every request
/// llmsurge makes to the target besides the load (the checks, its `/metrics`).
pub fn check_url(base_url: &str, path: &str, params: &[(String, String)]) -> String {
    let url = endpoint(
        &llmsurge_proto::credentials::without_user_info(base_url),
        path,
    );
    match reqwest::Url::parse(&url) {
        Ok(mut parsed) if !params.is_empty() => {
            parsed.query_pairs_mut().extend_pairs(params.iter());
            parsed.to_string()
        }
        _ => url,
    }
}

/// Whether a readiness answer says the server is not ready: anything but a success, or
/// the 404/405 of a server without the route.
fn unhealthy(status: reqwest::StatusCode) -> bool {
    !status.is_success() && !matches!(status.as_u16(), 404 | 405)
}

/// Whether `status` refuses the request's credentials (401, 403).
fn refused(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 403)
}

/// Whether a failed target check is the server refusing the credentials of both its
/// routes: the server is up (a sweep's readiness wait ends there, and each point's run,
/// with its own key, says what is wrong).
pub fn refused_credentials(e: &UsageError) -> bool {
    [
        reqwest::StatusCode::UNAUTHORIZED,
        reqwest::StatusCode::FORBIDDEN,
    ]
    .iter()
    .any(|s| e.0.contains(&format!("GET /v1/models answered {s}:")))
}

/// The bound on the readiness request: it is advisory, so a route that hangs (a
/// gateway's `/health` waiting on every upstream) must not hold the run.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// What an unhealthy readiness route did.
enum Health {
    /// It answered this status.
    Status(reqwest::StatusCode),
    /// It did not answer within [`HEALTH_TIMEOUT`].
    Hung,
}

impl Health {
    /// Whether it refused the credentials.
    fn refused(&self) -> bool {
        matches!(self, Health::Status(s) if refused(*s))
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Status(status) => write!(f, "answered {status}"),
            Health::Hung => write!(f, "did not answer within {} s", HEALTH_TIMEOUT.as_secs()),
        }
    }
}

/// One check of a target: the readiness path (advisory), then `/v1/models` and the
/// model to use. An unhealthy readiness answer stops the run only when the model list
/// is not usable either (no model listed, and no `--model` or a 5xx list): a gateway's
/// `/health` may refuse or fail where its models answer.
async fn check(
    client: &reqwest::Client,
    base_url: &str,
    model: Option<&str>,
    target: &TargetCheck<'_>,
) -> Result<Checked, UsageError> {
    let tls = target.tls;
    let headers = llmsurge_proto::credentials::target_headers(
        target.request_format,
        target.api_key,
        target.headers,
        base_url,
    );
    let get = |path: &str| {
        let mut request = client.get(check_url(base_url, path, target.params));
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.expose());
        }
        request
    };
    // What messages show of the URL (they reach the terminal and the report).
    let shown = llmsurge_proto::Redaction::default().url(base_url);
    let https = base_url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if target.http2
        && https
        && let Some(chosen) = alpn_without_h2(base_url, target).await
    {
        return Err(UsageError(format!(
            "--target {shown}: the server does not agree to HTTP/2 over TLS (it chose {chosen} by ALPN), which --http2 on https:// needs: drop {}",
            target.flag("--http2")
        )));
    }
    // What a user can act on (an unknown issuer, a refused connection, …) and what to
    // do; else the whole chain: reqwest's own message and its first source ("client
    // error (Connect)") hide the cause.
    let unreachable = async |e: reqwest::Error| {
        let problem = match llmsurge_proto::http::connect_problem(&e) {
            Some(p) => Some(p),
            None => {
                diagnose(
                    base_url,
                    tls,
                    &check_url(base_url, "/v1/models", target.params),
                    &headers,
                )
                .await
            }
        };
        if let Some(problem) = problem {
            return UsageError(format!("--target {shown}: {}", problem.line()));
        }
        let cause = llmsurge_proto::http::error_chain(&e);
        let cause = llmsurge_proto::Redaction::default()
            .text(&cause)
            .into_owned();
        // HTTP/2 fails in ways hyper names vaguely (a closed connection, an "unspecific
        // protocol error", no ALPN) when the server does not speak it: say what to try.
        let hint = match (target.http2, base_url.starts_with("http://")) {
            (false, _) => "",
            (true, true) => {
                "; with --http2 on http:// the server must speak HTTP/2 with prior knowledge (h2c): drop --http2 if it does not"
            }
            (true, false) => {
                "; with --http2 on https:// the server must agree to HTTP/2 by ALPN (h2): drop --http2 if it does not"
            }
        };
        UsageError(format!(
            "--target {shown}: cannot reach the server ({cause}){hint}"
        ))
    };

    // Servers without the route (404, 405) are fine; an unhealthy answer, or none
    // within HEALTH_TIMEOUT, is judged with the model list below.
    let health = match target.health {
        HealthPath::Off => None,
        HealthPath::Path(path) => match get(path).timeout(HEALTH_TIMEOUT).send().await {
            Ok(r) => unhealthy(r.status()).then(|| (path.as_str(), Health::Status(r.status()))),
            Err(e) if e.is_timeout() => Some((path.as_str(), Health::Hung)),
            Err(e) => return Err(unreachable(e).await),
        },
    };

    let listing = match get("/v1/models").send().await {
        Ok(r) => r,
        Err(e) => return Err(unreachable(e).await),
    };
    let status = listing.status();
    let server_header = listing
        .headers()
        .get(reqwest::header::SERVER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let mut model_list = Err(format!("HTTP {status}"));
    let models = if status.is_success() {
        // Read with a bound: the list is parsed whole, and a server may send without end.
        let body = match llmsurge_proto::http::read_limited(listing, limits::MODEL_LIST).await {
            Ok(b) => b,
            Err(llmsurge_proto::http::LimitedReadError::Transport(e)) => {
                return Err(unreachable(e).await);
            }
            Err(_) => {
                return Err(UsageError(format!(
                    "--target {shown}: GET /v1/models answered more than {} (the most llmsurge reads of a model list)",
                    limits::describe(limits::MODEL_LIST)
                )));
            }
        };
        model_list = serde_json::from_slice::<serde_json::Value>(&body)
            .map(|v| (v, server_header))
            .map_err(|_| "the answer is not JSON".to_string());
        serde_json::from_slice::<ModelList>(&body)
            .map(|l| l.data.into_iter().map(|m| m.id).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut warnings = Vec::new();
    if let Some((path, health)) = health {
        let usable = !models.is_empty() || (model.is_some() && !status.is_server_error());
        if !usable && health.refused() && refused(status) {
            // Both routes want credentials: the key is missing or wrong, whatever the
            // readiness route is.
            let api_key = target.flag("--api-key");
            let given = match target.api_key {
                // Named by source, with how to drop it: a key exported in a shell
                // profile is easily forgotten.
                Some(key) => {
                    let origin = crate::cli::origin::api_key(key.expose());
                    let replace = match &origin {
                        crate::cli::origin::Origin::Flag(_) => {
                            format!("pass the right key with {api_key}")
                        }
                        other => format!(
                            "{} or pass the right key with {api_key}",
                            other.how_to_drop()
                        ),
                    };
                    format!(
                        "the API key from {} was refused; {replace}",
                        origin.describe()
                    )
                }
                None if !target.headers.is_empty() => {
                    format!("the credentials given were refused; pass {api_key}")
                }
                None => format!(
                    "no API key was given; pass {api_key} (or set LLMSURGE_API_KEY or OPENAI_API_KEY)"
                ),
            };
            return Err(UsageError(format!(
                "--target {shown}: GET {} {health} and GET /v1/models answered {status}: {given}, or a gateway's own key header in {} '{{\"headers\": {{...}}}}'",
                inert::terminal(path),
                target.flag("--backend-kwargs")
            )));
        }
        if !usable && unhealthy(status) {
            // Both failed otherwise (LiteLLM's proxy answers a missing key 500 and a
            // wrong one 400 on every route): either cause may be the one.
            return Err(UsageError(format!(
                "--target {shown}: GET {} {health} and GET /v1/models answered {status}; the server is not ready, or wants a key it was not given (pass {}, or {} off if that route is not its readiness check)",
                inert::terminal(path),
                target.flag("--api-key"),
                target.flag("--health-path")
            )));
        }
        if !usable {
            return Err(UsageError(format!(
                "--target {shown}: GET {} {health}; the server is not ready (pass {} off if that route is not its readiness check)",
                inert::terminal(path),
                target.flag("--health-path")
            )));
        }
        let listed = if models.is_empty() {
            format!("--model is given (GET /v1/models answered {status})")
        } else {
            "GET /v1/models lists its models".to_string()
        };
        warnings.push(format!(
            "--target {shown}: GET {} {health}; going on, as {listed} (--health-path PATH|off chooses the readiness check)",
            inert::terminal(path)
        ));
    }
    let model = match (model, models.first()) {
        (Some(m), _) => {
            if !models.is_empty() && !models.iter().any(|x| x == m) {
                // The ids are the server's text: shown inert, on this one line, and the
                // list's length cut for one readable line.
                let served: Vec<_> = models.iter().map(|id| inert::terminal(id)).collect();
                return Err(UsageError(format!(
                    "--model {m:?} is not served by {shown} (it serves: {})",
                    inert::bounded(&served.join(", "), SERVED_LIST_SHOWN)
                )));
            }
            m.to_string()
        }
        (None, Some(first)) if first.len() > limits::MODEL_ID => {
            return Err(UsageError(format!(
                "--target {shown}: the first model GET /v1/models lists has an id of {} bytes, longer than llmsurge sends ({}); pass {}",
                first.len(),
                limits::describe(limits::MODEL_ID),
                target.flag("--model")
            )));
        }
        (None, Some(first)) => first.clone(),
        (None, None) if status.is_success() => {
            return Err(UsageError(format!(
                "--target {shown} lists no models; pass {}",
                target.flag("--model")
            )));
        }
        (None, None) => {
            return Err(UsageError(format!(
                "--target {shown}: GET /v1/models answered {status}; pass {} (or {} if it needs one)",
                target.flag("--model"),
                target.flag("--api-key")
            )));
        }
    };
    Ok(Checked {
        model,
        models,
        model_list,
        warnings,
    })
}

/// Bound on [`diagnose`]'s one request.
const DIAGNOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cause of a failure to reach an `https://` target that the failure hid: over TLS
/// 1.3 a server refuses a client certificate only after the handshake, so the request
/// fails as "connection closed"; over TLS 1.2 the refusal ends the handshake, which names
/// it. One GET of `url` (with the target's `headers`) with TLS 1.2 at most; `None` when
/// it shows nothing either (a server that speaks only TLS 1.3, or another cause).
async fn diagnose(
    base_url: &str,
    tls: &llmsurge_proto::http::TlsConfig,
    url: &str,
    headers: &[(String, Secret)],
) -> Option<llmsurge_proto::http::ConnectProblem> {
    if !base_url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    {
        return None;
    }
    let client = llmsurge_proto::http::client_builder(base_url, tls)
        .ok()?
        .tls_version_max(reqwest::tls::Version::TLS_1_2)
        .timeout(DIAGNOSE_TIMEOUT)
        .build()
        .ok()?;
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.expose());
    }
    let e = request.send().await.err()?;
    llmsurge_proto::http::connect_problem(&e)
}

/// Requests the probe sends to compare prompt and output lengths (the first is also the
/// body check).
const PROBE_SAMPLES: u64 = 5;
/// The most output tokens a probe request after the first asks for (the run's length
/// when shorter): a server that ends outputs early despite `ignore_eos` mostly shows
/// within it (gateways seen ended outputs at 1 to 31 tokens of 32).
const PROBE_OUTPUT_TOKENS: u32 = 32;
/// The most the probe may delay the run. A server refuses a field at once (validation
/// comes before any queue); a probe still unanswered by then was accepted, and only the
/// prompt-length check, which needs the answer's usage, is skipped.
pub const PROBE_BUDGET: Duration = Duration::from_secs(3);
/// Prompt tokens a chat template may add to a request (role markers, a default system
/// line): a median difference within this is not reported.
pub const TEMPLATE_ALLOWANCE_TOKENS: f64 = 16.0;
/// Relative difference of the median prompt length tolerated on top of the allowance.
pub const LENGTH_TOLERANCE: f64 = 0.10;

/// What the pre-run probe found: warnings for the terminal and the report.
#[derive(Debug, Default)]
pub struct ProbeOutcome {
    /// One line each, without the `warning: ` prefix.
    pub warnings: Vec<String>,
}

/// How a refused body field can be fixed, by where it came from.
fn field_fix(field: &str, backend: &llmsurge_proto::BackendConfig) -> String {
    if backend.extra_body.contains_key(field) {
        format!("remove {field} from --backend-kwargs extra_body")
    } else if field == "ignore_eos" {
        "pass --ignore-eos false (output lengths are then the server's choice, up to max_tokens)"
            .into()
    } else if field == "min_tokens" {
        "pass --min-tokens false".into()
    } else if field == "stream_options" {
        "pass --stream false (TTFT and ITL need a stream that the server accepts)".into()
    } else {
        "the server does not take a field llmsurge sends; please report it".into()
    }
}

/// The top-level body field a 400/422 answer names, if it names one.
fn refused_field(
    body: &serde_json::Map<String, serde_json::Value>,
    message: &str,
) -> Option<String> {
    // Longest first, so `max_completion_tokens` is not taken for `max_tokens`.
    let mut keys: Vec<&String> = body.keys().collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    keys.into_iter()
        .filter(|k| !matches!(k.as_str(), "model" | "messages" | "prompt"))
        .find(|k| message.contains(k.as_str()))
        .cloned()
}

/// Sends the run's own body shape once (max_tokens 1, marked as a probe) before any load,
/// so a strict server's refusal of a field is found now and not in every request. A
/// default field the user did not ask for (`ignore_eos`) is dropped with a warning; one
/// they asked for is a usage error naming the fix. Then compares the server's prompt
/// counts with the client's over a few prompts, and its output lengths with those asked
/// (see `docs/cli.md`).
pub async fn probe(
    worker: &mut llmsurge_proto::WorkerConfig,
    ignore_eos_explicit: bool,
    processor: &str,
) -> Result<ProbeOutcome, UsageError> {
    use llmsurge_worker::backend::{Backend, Exchange};
    let mut outcome = ProbeOutcome::default();
    // Prompts of the probe's own streams, which no benchmark draws, so the probe warms no
    // prefix cache that the first benchmark would then hit.
    let mut probe_cfg = worker.clone();
    probe_cfg.reseed("probe", 0);
    let Ok(mut source) = crate::data::source_factory(&probe_cfg) else {
        return Ok(outcome); // the workers report data errors with their context
    };
    let mut samples = Vec::new();
    for slot in 0..PROBE_SAMPLES {
        match source.request(slot) {
            Ok(Some(mut req)) => {
                // The first, the body check, answers at once; the others are long enough
                // to see a server stop before the length asked, short enough for the
                // probe's budget.
                req.max_tokens = Some(match (slot, req.max_tokens) {
                    (0, _) | (_, None) => 1,
                    (_, Some(n)) => n.min(PROBE_OUTPUT_TOKENS),
                });
                // A dataset's rows are the benchmarks' own whatever the seed: a marker
                // ahead of the text keeps the probe's prompt out of their prefix.
                if matches!(worker.data, llmsurge_proto::DataSpec::Table(_)) {
                    mark_probe(&mut req.prompt, slot);
                }
                samples.push(req);
            }
            _ => break,
        }
    }
    let Some(first) = samples.first() else {
        return Ok(outcome);
    };
    let shown = llmsurge_proto::Redaction::default().url(&worker.backend.base_url);
    let deadline = tokio::time::Instant::now() + PROBE_BUDGET;
    let mut dropped = false;
    let first_exchange = loop {
        let mut cfg = worker.backend.clone();
        cfg.headers
            .push((crate::mock::PROBE_HEADER.to_string(), "1".to_string()));
        let backend = Backend::new(&cfg).map_err(|e| UsageError(format!("--target: {e}")))?;
        let body = backend.build_body(first);
        let mut ex = Exchange::default();
        let answered = tokio::time::timeout_at(deadline, backend.execute(body.clone(), &mut ex))
            .await
            .is_ok();
        if !answered {
            return Ok(outcome); // slow, not refused: see PROBE_BUDGET
        }
        let Some(err) = &ex.error else { break ex };
        let llmsurge_proto::ErrorKind::Http { status: 400 | 422 } = err.kind else {
            outcome.warnings.push(format!(
                "the probe request before the run failed ({}: {}); going on",
                err.kind.key(),
                err.message
            ));
            return Ok(outcome);
        };
        let fields = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        // A prompt beyond the context window names no field, whatever words it uses
        // ("in the input"): the run's own prompts may fit.
        let too_long = err.message.contains("maximum context length");
        let Some(field) = refused_field(&fields, &err.message).filter(|_| !too_long) else {
            outcome.warnings.push(format!(
                "the probe request before the run was refused ({}: {}); going on",
                err.kind.key(),
                err.message
            ));
            return Ok(outcome);
        };
        let status = err.kind.key();
        let from_default = field == "ignore_eos"
            && !ignore_eos_explicit
            && !worker.backend.extra_body.contains_key("ignore_eos");
        if from_default && !dropped {
            outcome.warnings.push(format!(
                "{shown} refuses the field ignore_eos ({status}: {}); sending requests without it, so output lengths are the server's choice, up to max_tokens",
                err.message
            ));
            worker.backend.ignore_eos = false;
            dropped = true;
            continue;
        }
        return Err(UsageError(format!(
            "--target {shown} refuses the request field {field} ({status}: {}); {}",
            err.message,
            field_fix(&field, &worker.backend)
        )));
    };
    let rest = probe_rest(worker, &samples, first_exchange);
    let Ok(exchanges) = tokio::time::timeout_at(deadline, rest).await else {
        return Ok(outcome); // slow, not refused: see PROBE_BUDGET
    };
    if let Some(w) = output_length_warning(worker, &samples, &exchanges) {
        outcome.warnings.push(w);
    }
    let check = prompt_length_warning(worker, processor, &samples, &exchanges);
    if let Ok(Some(w)) = tokio::time::timeout_at(deadline, check).await {
        outcome.warnings.push(w);
    }
    Ok(outcome)
}

/// Sends the probe's samples after the first (whose exchange is `first`), together;
/// the exchanges in the samples' order.
async fn probe_rest(
    worker: &llmsurge_proto::WorkerConfig,
    samples: &[llmsurge_worker::PreparedRequest],
    first: llmsurge_worker::backend::Exchange,
) -> Vec<llmsurge_worker::backend::Exchange> {
    use llmsurge_worker::backend::{Backend, Exchange};
    let mut exchanges = vec![first];
    let mut cfg = worker.backend.clone();
    cfg.headers
        .push((crate::mock::PROBE_HEADER.to_string(), "1".to_string()));
    let Ok(backend) = Backend::new(&cfg) else {
        return exchanges;
    };
    // Together: the probe's time is one answer's, not the sum.
    let rest = samples[1..].iter().map(|req| {
        let backend = &backend;
        async move {
            let mut ex = Exchange::default();
            backend.execute(backend.build_body(req), &mut ex).await;
            ex
        }
    });
    exchanges.extend(futures_util::future::join_all(rest).await);
    exchanges
}

/// When the probe asked for exact output lengths (`ignore_eos` or `min_tokens` sent) and
/// a completed answer ended short of it with a `stop`: a warning naming the likely cause
/// (the server, or a gateway in front of it, ignores `ignore_eos`) and what to try.
fn output_length_warning(
    worker: &llmsurge_proto::WorkerConfig,
    samples: &[llmsurge_worker::PreparedRequest],
    exchanges: &[llmsurge_worker::backend::Exchange],
) -> Option<String> {
    let b = &worker.backend;
    let sent = llmsurge_coordinator::output_lengths::SentFields::of(b);
    if !sent.any() {
        return None; // lengths are the server's choice, as asked
    }
    let backend = llmsurge_worker::backend::Backend::new(b).ok()?;
    let mut got = Vec::new();
    let mut short = 0;
    // The first, the body check, asked for one token.
    for (req, ex) in samples.iter().zip(exchanges).skip(1) {
        let Some(asked) = backend.max_output_tokens(req) else {
            continue;
        };
        if ex.error.is_some() {
            continue;
        }
        // Only usage counts tokens: a streamed count is of chunks.
        let Some(received) = ex.usage.and_then(|u| u.completion_tokens) else {
            continue;
        };
        if received < asked && ex.finish_reason == Some(llmsurge_proto::FinishReason::Stop) {
            short += 1;
        }
        got.push((asked, received));
    }
    if short == 0 {
        return None;
    }
    let list: Vec<String> = got.iter().map(|(_, r)| r.to_string()).collect();
    let asked: Vec<String> = got.iter().map(|(a, _)| a.to_string()).collect();
    Some(format!(
        "output lengths fall short: {short} of {} probe requests ended with finish reason `stop` before the length asked (asked {} output tokens, got {}): the server, or a gateway in front of it, ignores {}, so the run's load will be lighter than asked and its figures flatter the server; {}",
        got.len(),
        asked.join(", "),
        list.join(", "),
        sent.fields(),
        sent.what_to_try()
    ))
}

/// Puts a probe marker ahead of the prompt's first text (a few tokens: well within the
/// length check's allowance).
fn mark_probe(prompt: &mut llmsurge_worker::Prompt, slot: u64) {
    use llmsurge_worker::Prompt;
    let first = match prompt {
        Prompt::Text(t) | Prompt::Media { text: t, .. } | Prompt::Ranking { query: t, .. } => t,
        Prompt::Messages(m) => match m.first_mut() {
            Some(m) => &mut m.content,
            None => return,
        },
        Prompt::Batch(v) => match v.first_mut() {
            Some(t) => t,
            None => return,
        },
        // Token ids carry no text to mark; the probe goes unmarked.
        Prompt::TokenIds(_) => return,
    };
    first.insert_str(0, &format!("probe {slot}: "));
}

/// Compares the server's prompt counts (usage) with the client's over the samples; a
/// warning naming the fix when the median differs beyond a chat template's overhead.
async fn prompt_length_warning(
    worker: &llmsurge_proto::WorkerConfig,
    processor: &str,
    samples: &[llmsurge_worker::PreparedRequest],
    exchanges: &[llmsurge_worker::backend::Exchange],
) -> Option<String> {
    // Images and audio cost prompt tokens only the server can count: no comparison.
    if samples.iter().any(|r| !r.prompt.media().is_empty()) {
        return None;
    }
    let mut pairs = Vec::new(); // (client, server)
    for (req, ex) in samples.iter().zip(exchanges) {
        if let (Some(client), Some(server)) = (
            req.prompt_tokens,
            ex.usage.as_ref().and_then(|u| u.prompt_tokens),
        ) {
            pairs.push((f64::from(client), f64::from(server)));
        }
    }
    let (client, server) = length_medians(&pairs)?;
    if !lengths_disagree(client, server) {
        return None;
    }
    let counted_by_server = tokenize_count(worker, &samples[0]).await.map_or_else(String::new, |n| {
        format!(
            "; the server's /tokenize counts {n} tokens for the first prompt, which the client counted as {}",
            samples[0].prompt_tokens.unwrap_or(0)
        )
    });
    Some(format!(
        "prompt lengths differ: the server counted a median of {server:.0} prompt tokens per request where the client's tokenizer ({processor}) counted {client:.0}, more than a chat template adds; pass --processor with the server's tokenizer (a tokenizer.json, a model folder or a Hugging Face id) so prompts have the requested length{counted_by_server}"
    ))
}

/// Medians of the client's and the server's counts, when there is any pair.
fn length_medians(pairs: &[(f64, f64)]) -> Option<(f64, f64)> {
    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
    if pairs.is_empty() {
        return None;
    }
    Some((
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
    ))
}

/// Whether the server's median prompt length is beyond what a chat template explains:
/// more than [`TEMPLATE_ALLOWANCE_TOKENS`] and more than [`LENGTH_TOLERANCE`] apart.
pub fn lengths_disagree(client: f64, server: f64) -> bool {
    let diff = (server - client).abs();
    diff > TEMPLATE_ALLOWANCE_TOKENS && diff > LENGTH_TOLERANCE * client
}

/// The count of the server's `/tokenize` (vLLM, SGLang, the mock) for one prompt.
async fn tokenize_count(
    worker: &llmsurge_proto::WorkerConfig,
    req: &llmsurge_worker::PreparedRequest,
) -> Option<u64> {
    use llmsurge_worker::Prompt;
    let text = match &req.prompt {
        Prompt::Text(t) => t.clone(),
        other => other.joined(),
    };
    let b = &worker.backend;
    let client = llmsurge_proto::http::client_builder(&b.base_url, &b.tls)
        .ok()
        .map(|c| llmsurge_proto::http::http2_when(c, b.http2))?
        .connect_timeout(b.connect_timeout)
        .timeout(b.connect_timeout + Duration::from_secs(10))
        .build()
        .ok()?;
    let mut request = client.post(check_url(&b.base_url, "/tokenize", &b.params));
    for (name, value) in llmsurge_proto::credentials::for_backend(b) {
        if !name.eq_ignore_ascii_case("content-type") {
            request = request.header(name, value.expose());
        }
    }
    // After the user's headers: the probe's marker and body type are the probe's own.
    let request = request
        .header(crate::mock::PROBE_HEADER, "1")
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(serde_json::json!({"model": b.model, "prompt": text}).to_string());
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = llmsurge_proto::http::read_limited(response, limits::SMALL_ANSWER)
        .await
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v.get("count").and_then(serde_json::Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_template_is_not_a_disagreement() {
        assert!(!lengths_disagree(64.0, 72.0), "8 tokens: a template");
        assert!(!lengths_disagree(1000.0, 1080.0), "8%: within tolerance");
        assert!(lengths_disagree(64.0, 110.0), "the reported case");
        assert!(lengths_disagree(1000.0, 1200.0));
        assert!(lengths_disagree(256.0, 128.0), "fewer counts too");
    }

    #[test]
    fn the_refused_field_is_found_in_the_message() {
        let body: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"model":"m","messages":[],"ignore_eos":true,"max_tokens":1,"max_completion_tokens":1}"#,
        )
        .expect("json");
        let named = |m: &str| refused_field(&body, m);
        assert_eq!(
            named("Unexpected fields in the request: {'ignore_eos'}").as_deref(),
            Some("ignore_eos")
        );
        assert_eq!(
            named("Unrecognized request argument supplied: max_completion_tokens").as_deref(),
            Some("max_completion_tokens")
        );
        assert_eq!(named("The model `m` does not exist in messages"), None);
    }
}
