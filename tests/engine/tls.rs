//! HTTPS end to end: the real binary against the real mock serving TLS, with a throwaway
//! CA and leaf certificates made at run time (no key material in the repository).
//! HTTP/1.1 and HTTP/2 over TLS, `--ca-cert`, `SSL_CERT_FILE`, `--insecure`, mutual TLS,
//! and each certificate or connection problem as one line that names it (exit 2).
//! Counts are checked against what the mock saw (`/stats`: completed responses, TLS
//! handshakes per ALPN protocol, refused handshakes).

use crate::scenario::Bench;
use crate::support::{Finished, mock, ok_report};
use llmsurge::mock::{MockConfig, MockServer};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// Requests of each run that must all complete.
const REQUESTS: u64 = 12;

/// A CA and the certificates it signed, written as PEM files in a temporary directory.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate.
    ca: PathBuf,
}

/// What a leaf certificate is for, and how it is wrong.
#[derive(Clone, Copy)]
pub(crate) enum Leaf {
    /// A server certificate for 127.0.0.1 and localhost.
    Server,
    /// A server certificate that expired in 2021.
    Expired,
    /// A server certificate for another host only.
    OtherHost,
    /// A client certificate (for mutual TLS).
    Client,
    /// A server certificate for 127.0.0.1 that is a CA's, self-signed (what `openssl
    /// req -x509` makes by default), not signed by the PKI's CA.
    SelfSignedCa,
}

impl Pki {
    pub(crate) fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("llmsurge test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("CA certificate");
        let ca = dir.path().join(format!("{name}-ca.pem"));
        std::fs::write(&ca, cert.pem()).expect("write CA");
        Pki {
            dir,
            issuer: Issuer::new(params, key),
            ca,
        }
    }

    /// Signs a leaf certificate; its certificate and key files.
    pub(crate) fn leaf(&self, kind: Leaf, name: &str) -> (PathBuf, PathBuf) {
        let names = match kind {
            Leaf::Server | Leaf::Expired | Leaf::SelfSignedCa => {
                vec!["127.0.0.1".to_string(), "localhost".into()]
            }
            Leaf::OtherHost => vec!["other.example".to_string()],
            Leaf::Client => vec!["client.example".to_string()],
        };
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![match kind {
            Leaf::Client => ExtendedKeyUsagePurpose::ClientAuth,
            _ => ExtendedKeyUsagePurpose::ServerAuth,
        }];
        if let Leaf::Expired = kind {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = match kind {
            Leaf::SelfSignedCa => {
                params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                params.self_signed(&key)
            }
            _ => params.signed_by(&key, &self.issuer),
        }
        .expect("leaf certificate");
        let cert_path = self.dir.path().join(format!("{name}.pem"));
        let key_path = self.dir.path().join(format!("{name}-key.pem"));
        std::fs::write(&cert_path, cert.pem()).expect("write certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        (cert_path, key_path)
    }

    pub(crate) fn ca(&self) -> &str {
        path(&self.ca)
    }
}

/// The files the commands of docs/cli.md name (`ca.pem`, `client.pem`,
/// `client-key.pem`), made in `dir` at run time.
pub(crate) fn write_doc_files(dir: &Path) {
    let pki = Pki::new("docs");
    let (cert, key) = pki.leaf(Leaf::Client, "client");
    for (from, to) in [
        (&pki.ca, "ca.pem"),
        (&cert, "client.pem"),
        (&key, "client-key.pem"),
    ] {
        std::fs::copy(from, dir.join(to)).expect("copy a doc's file");
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// The instant mock serving HTTPS with `leaf` of `pki` (and requiring a client
/// certificate signed by `client_ca`, when given).
fn tls_mock(pki: &Pki, leaf: Leaf, client_ca: Option<&Path>) -> MockServer {
    let (cert, key) = pki.leaf(leaf, "server");
    mock(MockConfig {
        tls_cert: Some(cert),
        tls_key: Some(key),
        tls_client_ca: client_ca.map(Path::to_path_buf),
        ..MockConfig::instant()
    })
}

fn bench(server: &MockServer) -> Bench {
    Bench::on(server)
        .concurrent(2)
        .max_requests(REQUESTS)
        .data("prompt_tokens=16,output_tokens=4")
}

/// The run completed every request, and the mock sent every response to its end.
fn assert_all_completed(run: &Finished, server: &MockServer) {
    let report = ok_report(run);
    let b = &report.benchmarks[0];
    assert_eq!(b.requests.completed, REQUESTS, "{:?}", b.errors);
    // The probe's request is answered by the mock's twin and counts in no benchmark.
    assert_eq!(server.stats().completed, REQUESTS, "{}", run.stderr);
}

/// A run that stopped before any load: exit 2, one `error:` line that names `cause`
/// and says what to do (`advice`), and no backtrace.
fn assert_usage_error(run: &Finished, cause: &str, advice: &str) {
    assert_eq!(run.code(), 2, "{}", run.stderr);
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in {}", run.stderr));
    assert!(line.contains(cause), "{cause:?} not in {line:?}");
    assert!(line.contains(advice), "{advice:?} not in {line:?}");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn without_the_ca_the_run_stops_naming_the_unknown_issuer() {
    let pki = Pki::new("unknown");
    let server = tls_mock(&pki, Leaf::Server, None);
    let run = bench(&server).run();
    assert_usage_error(&run, "unknown issuer", "--ca-cert");
    assert_eq!(server.stats().completed, 0);
    assert!(server.stats().connections.tls_failed >= 1);
}

#[test]
fn ca_cert_completes_every_request_over_http1_and_http2() {
    let pki = Pki::new("both");
    for http2 in [false, true] {
        let server = tls_mock(&pki, Leaf::Server, None);
        let mut bench = bench(&server).arg("--ca-cert", pki.ca());
        if http2 {
            bench = bench.flag("--http2");
        }
        let run = bench.run();
        assert_all_completed(&run, &server);
        // ALPN picked the protocol asked for: with --http2 every connection is h2; without,
        // the workers' are HTTP/1.1 (the target check's client offers both, so it may
        // get h2).
        // The /metrics scrapes reached the mock over TLS too, with the same CA.
        assert!(server.stats().requests.metrics >= 1, "{}", run.stderr);
        let c = server.stats().connections;
        if http2 {
            assert!(c.tls_h2 >= 1 && c.tls_http1 == 0, "{c:?}");
        } else {
            assert!(c.tls_http1 >= 1, "{c:?}");
        }
        assert_eq!(c.tls_failed, 0, "{c:?}");
    }
}

/// `SSLKEYLOGFILE` (as curl and browsers read it) makes the mock write each TLS
/// session's secrets in the NSS key log format, so a capture of a run can be decrypted
/// (`WIRE=1 scripts/bench-fidelity.sh`): every connection that carried a request (the
/// mock's `--truth` names them) shook hands, and each handshake logged the five TLS 1.3
/// secrets under its client random.
#[test]
fn the_mock_logs_each_tls_sessions_secrets_to_sslkeylogfile() {
    use std::collections::{BTreeMap, BTreeSet};
    let pki = Pki::new("keylog");
    let (cert, key) = pki.leaf(Leaf::Server, "server");
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = dir.path().join("keys.log");
    let truth = dir.path().join("truth.jsonl");
    for http2 in [false, true] {
        let mut server = crate::engine::faults::MockProcess::start_with_env(
            &[
                "--instant",
                "--tls-cert",
                path(&cert),
                "--tls-key",
                path(&key),
                "--truth",
                path(&truth),
            ],
            &[("SSLKEYLOGFILE", path(&keys))],
        );
        let mut bench = Bench::target(&server.url)
            .concurrent(2)
            .max_requests(REQUESTS)
            .data("prompt_tokens=16,output_tokens=4")
            .arg("--ca-cert", pki.ca());
        if http2 {
            bench = bench.flag("--http2");
        }
        let run = bench.run();
        assert_eq!(
            ok_report(&run).benchmarks[0].requests.completed,
            REQUESTS,
            "{}",
            run.stderr
        );
        server.stop(); // SIGTERM: the truth file is complete
        let carried: BTreeSet<u64> = crate::support::recorded(&truth)
            .iter()
            .filter_map(|line| line["connection"].as_u64())
            .collect();
        let mut sessions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in std::fs::read_to_string(&keys).expect("the key log").lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "not a key log line: {line:?}");
            assert_eq!(fields[1].len(), 64, "a client random is 32 bytes: {line:?}");
            assert!(
                fields[2].len() >= 64,
                "a secret of 32 bytes or more: {line:?}"
            );
            sessions
                .entry(fields[1].to_string())
                .or_default()
                .insert(fields[0].to_string());
        }
        assert!(
            !carried.is_empty() && sessions.len() >= carried.len(),
            "{} sessions logged, {} connections carried requests",
            sessions.len(),
            carried.len()
        );
        for labels in sessions.values() {
            let expected: BTreeSet<String> = [
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                "CLIENT_TRAFFIC_SECRET_0",
                "SERVER_TRAFFIC_SECRET_0",
                "EXPORTER_SECRET",
            ]
            .into_iter()
            .map(String::from)
            .collect();
            assert_eq!(labels, &expected);
        }
        std::fs::remove_file(&keys).expect("the next run's log starts empty");
    }
}

#[test]
fn the_ca_cert_variable_and_ssl_cert_file_each_complete_every_request() {
    let pki = Pki::new("env");
    for var in ["LLMSURGE_CA_CERT", "SSL_CERT_FILE"] {
        let server = tls_mock(&pki, Leaf::Server, None);
        let run = bench(&server).run_with_env(&[(var, pki.ca())]);
        assert_all_completed(&run, &server);
    }
}

#[test]
fn insecure_completes_every_request_and_says_so() {
    let pki = Pki::new("insecure");
    let server = tls_mock(&pki, Leaf::Server, None);
    let run = bench(&server).flag("--insecure").run();
    assert_all_completed(&run, &server);
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("warning: --insecure")),
        "{}",
        run.stderr
    );
    assert!(run.report().metadata.tls_insecure);
    // A verified run's report does not carry the flag.
    let server = tls_mock(&pki, Leaf::Server, None);
    let run = bench(&server).arg("--ca-cert", pki.ca()).run();
    assert!(!run.report().metadata.tls_insecure);
    assert!(!run.stderr.contains("--insecure"), "{}", run.stderr);
}

#[test]
fn mutual_tls_completes_with_a_client_certificate_and_is_refused_without() {
    let pki = Pki::new("mtls");
    let (cert, key) = pki.leaf(Leaf::Client, "client");
    for http2 in [false, true] {
        let server = tls_mock(&pki, Leaf::Server, Some(&pki.ca));
        let mut with = bench(&server)
            .arg("--ca-cert", pki.ca())
            .arg("--client-cert", path(&cert))
            .arg("--client-key", path(&key));
        if http2 {
            with = with.flag("--http2");
        }
        let run = with.run();
        assert_all_completed(&run, &server);
        assert_eq!(server.stats().connections.tls_failed, 0);
        // The key's contents never reach the report (its path may).
        let json = std::fs::read_to_string(run.report_path()).expect("report");
        let pem = std::fs::read_to_string(&key).expect("key");
        let body = pem.lines().nth(1).expect("a key line");
        assert!(!json.contains(body));
    }

    // The mock refuses a client without a certificate, and one whose certificate
    // another CA signed.
    let other = Pki::new("stranger");
    let (stranger_cert, stranger_key) = other.leaf(Leaf::Client, "stranger");
    for identity in [None, Some((&stranger_cert, &stranger_key))] {
        let server = tls_mock(&pki, Leaf::Server, Some(&pki.ca));
        let mut without = bench(&server).arg("--ca-cert", pki.ca());
        if let Some((c, k)) = identity {
            without = without
                .arg("--client-cert", path(c))
                .arg("--client-key", path(k));
        }
        let run = without.run();
        assert_usage_error(&run, "refused the client certificate", "--client-cert");
        let stats = server.stats();
        assert!(stats.connections.tls_failed >= 1, "{stats:?}");
        assert_eq!(stats.completed, 0);
    }
}

#[test]
fn each_certificate_problem_is_named_with_what_to_do() {
    let pki = Pki::new("problems");
    let expired = tls_mock(&pki, Leaf::Expired, None);
    let run = bench(&expired).arg("--ca-cert", pki.ca()).run();
    assert_usage_error(&run, "expired", "--insecure");

    let other_host = tls_mock(&pki, Leaf::OtherHost, None);
    let run = bench(&other_host).arg("--ca-cert", pki.ca()).run();
    assert_usage_error(&run, "not valid for this host name", "--insecure");
    // --insecure gets past both, as it says.
    let run = bench(&other_host).flag("--insecure").run();
    assert_all_completed(&run, &other_host);

    // A self-signed CA certificate served as the server's own, trusted by --ca-cert.
    let (cert, key) = pki.leaf(Leaf::SelfSignedCa, "self-signed-ca");
    let self_signed = mock(MockConfig {
        tls_cert: Some(cert.clone()),
        tls_key: Some(key),
        ..MockConfig::instant()
    });
    let run = bench(&self_signed).arg("--ca-cert", path(&cert)).run();
    assert_usage_error(&run, "is a CA certificate", "CA:FALSE");
}

#[test]
fn plain_http_on_the_port_and_a_refused_connection_are_named() {
    let plain = mock(MockConfig::instant());
    let url = plain.base_url().replace("http://", "https://");
    let run = Bench::target(&url)
        .max_requests(1)
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    assert_usage_error(&run, "did not answer with TLS", "http://");

    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    for scheme in ["http", "https"] {
        let run = Bench::target(&format!("{scheme}://127.0.0.1:{port}"))
            .max_requests(1)
            .data("prompt_tokens=16,output_tokens=4")
            .run();
        assert_usage_error(&run, "connection refused", "start the server");
    }
}

#[test]
fn a_bad_tls_file_is_a_usage_error_naming_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").expect("write");
    let pki = Pki::new("files");
    let (cert, _) = pki.leaf(Leaf::Client, "client");
    let server = tls_mock(&pki, Leaf::Server, None);
    for (args, flag) in [
        (vec!["--ca-cert", path(&missing)], "--ca-cert"),
        (vec!["--ca-cert", path(&not_pem)], "--ca-cert"),
        (
            vec!["--client-cert", path(&cert), "--client-key", path(&not_pem)],
            "--client-key",
        ),
        (vec!["--client-cert", path(&cert)], "--client-key"),
    ] {
        let mut b = bench(&server);
        for pair in args.chunks(2) {
            b = b.arg(pair[0], pair[1]);
        }
        let run = b.run();
        assert_usage_error(&run, flag, "");
        assert!(run.stderr.lines().count() <= 2, "{}", run.stderr);
    }
    assert_eq!(server.stats().requests_total, 0);
}

/// Connection timing per benchmark, in every output format: over TLS each connection's
/// handshake is timed, and the connections opened are those the mock accepted for the
/// benchmark (the target check's, the probe's and the scrapes' are the coordinator's).
#[test]
fn connections_opened_and_their_time_are_reported_in_every_format() {
    let pki = Pki::new("timing");
    for (tls, http2) in [(true, false), (true, true), (false, false)] {
        let server = if tls {
            tls_mock(&pki, Leaf::Server, None)
        } else {
            mock(MockConfig::instant())
        };
        let mut b = bench(&server)
            .arg("--ca-cert", pki.ca())
            .arg("--server-metrics", "off")
            .outputs("json,csv,md,html,console,yaml");
        if http2 {
            b = b.flag("--http2");
        }
        let before = server.stats().connections.accepted;
        let run = b.run();
        let report = ok_report(&run);
        let accepted = server.stats().connections.accepted - before;
        let c = report.benchmarks[0]
            .client
            .connections
            .clone()
            .unwrap_or_else(|| panic!("no connections in {}", run.stderr));
        eprintln!("tls={tls} http2={http2}: {c:?}, mock accepted {accepted}");
        assert!(c.opened >= 1 && c.opened <= accepted, "{c:?} vs {accepted}");
        assert_eq!(c.opened + c.reused, REQUESTS, "{c:?}");
        assert_eq!(c.connect.count, c.opened);
        assert!(c.connect.max > 0.0 && c.connect.min <= c.connect.max);
        let file = |name: &str| {
            std::fs::read_to_string(run.dir.path().join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let csv = file("benchmarks.csv");
        assert!(
            csv.lines()
                .next()
                .expect("a header")
                .contains("client.connections_opened")
        );
        assert!(file("benchmarks.md").contains("### Connections"));
        assert!(file("benchmarks.html").contains("id=\"connections\""));
        assert!(file("benchmarks.yaml").contains("connections:"));
        assert!(
            run.stdout.contains("Connections (measured window)"),
            "{}",
            run.stdout
        );
    }
}

/// The scrapes name a certificate problem too: `--server-metrics` at an HTTPS server
/// whose CA the run does not trust warns with the cause, and the run goes on.
#[test]
fn a_scrape_names_the_certificate_problem() {
    let pki = Pki::new("scrape");
    let metrics = tls_mock(&pki, Leaf::Server, None);
    let target = mock(MockConfig::instant());
    let url = format!("{}/metrics", metrics.base_url());
    let run = bench(&target).arg("--server-metrics", &url).run();
    ok_report(&run);
    let warning = run
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: --server-metrics"))
        .unwrap_or_else(|| panic!("no scrape warning in {}", run.stderr));
    assert!(warning.contains("unknown issuer"), "{warning}");
    assert!(warning.contains("--ca-cert"), "{warning}");
    assert_eq!(metrics.stats().requests.metrics, 0);
    assert!(metrics.stats().connections.tls_failed >= 1);
}

/// What a hostile HTTPS server does once the coordinator's probe was answered (the
/// target check and the probe meet a well-behaved server, so the run starts).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hostile {
    /// Answers a ClientHello with a plain HTTP response.
    PlainHttp,
    /// Answers a ClientHello with bytes that are not TLS.
    Garbage,
    /// Answers a ClientHello with a fatal `handshake_failure` alert.
    Alert,
    /// Sends a response head without a length and one event, then closes the socket
    /// without a `close_notify`: a cut response.
    CutMidStream,
    /// The same response whole, its end said by a `close_notify`: complete.
    CloseNotifyEnds,
    /// Answers the first request on each connection (keep-alive) and closes on the
    /// next with its body unread (a keep-alive timeout crossing the request).
    ResetSecond,
}

/// A stream of one content token, a finish and `[DONE]`.
const SSE: &str = concat!(
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// A raw HTTPS/1.1 server of `pki`'s certificate behaving as `mode` says after the
/// probe; its URL and the count of POSTs it read (the probe's left out).
fn hostile(pki: &Pki, mode: Hostile) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (cert, key) = pki.leaf(Leaf::Server, "hostile");
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
        .expect("cert")
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    use rustls::pki_types::pem::PemObject;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config"),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    let posts = Arc::new(AtomicUsize::new(0));
    let probed = Arc::new(AtomicBool::new(false));
    let count = Arc::clone(&posts);
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { return };
            let (config, posts, probed) = (config.clone(), count.clone(), probed.clone());
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let after = probed.load(Ordering::SeqCst);
                let raw: &[u8] = match mode {
                    Hostile::PlainHttp => b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
                    Hostile::Garbage => b"this is not TLS at all\r\n\r\n",
                    // A plaintext alert record: fatal, handshake_failure.
                    Hostile::Alert => b"\x15\x03\x03\x00\x02\x02\x28",
                    _ => b"",
                };
                if after && !raw.is_empty() {
                    let _ = sock.read(&mut [0u8; 4096]);
                    let _ = sock.write_all(raw);
                    return;
                }
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, sock);
                let mut buf = Vec::new();
                for index in 0.. {
                    let Some((post, probe, length)) = read_head(&mut tls, &mut buf) else {
                        return;
                    };
                    if post && !probe {
                        posts.fetch_add(1, Ordering::SeqCst);
                    }
                    if post && !probe && mode == Hostile::ResetSecond && index > 0 {
                        // Most of the body unread: the close is a reset.
                        return;
                    }
                    while buf.len() < length {
                        let mut chunk = [0u8; 1 << 16];
                        match tls.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..length);
                    let whole = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{SSE}",
                        SSE.len()
                    );
                    let answer = if !post {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_string()
                    } else if probe {
                        probed.store(true, Ordering::SeqCst);
                        whole
                    } else {
                        match mode {
                            Hostile::CutMidStream => {
                                let first = SSE.split_inclusive("\n\n").next().unwrap_or("");
                                let _ = tls.write_all(
                                    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{first}").as_bytes(),
                                );
                                let _ = tls.flush();
                                let _ = tls.sock.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            Hostile::CloseNotifyEnds => {
                                let _ = tls.write_all(
                                    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{SSE}").as_bytes(),
                                );
                                tls.conn.send_close_notify();
                                let _ = tls.flush();
                                return;
                            }
                            _ => whole,
                        }
                    };
                    if tls.write_all(answer.as_bytes()).is_err() || tls.flush().is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, posts)
}

/// Reads one request head from `stream`: whether it is a POST, whether the probe's,
/// and its body's length; what follows it stays in `buf`. `None` at its end.
fn read_head(stream: &mut impl std::io::Read, buf: &mut Vec<u8>) -> Option<(bool, bool, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = req.parse(buf) {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let length = header("content-length")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let probe = header("x-llmsurge-probe").is_some();
            let post = req.method == Some("POST");
            buf.drain(..n);
            return Some((post, probe, length));
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A run of `requests` one at a time of `data` against a hostile server: its report's
/// one benchmark and its request log.
fn against_hostile(
    url: &str,
    pki: &Pki,
    requests: u64,
    data: &str,
) -> (Finished, llmsurge_coordinator::BenchmarkResult) {
    let run = Bench::target(url)
        .model("m")
        .arg("--ca-cert", pki.ca())
        .arg("--server-metrics", "off")
        .synchronous()
        .max_requests(requests)
        .request_timeout("60s")
        .data(data)
        .run();
    let report = run.report();
    crate::support::assert_identity(&report);
    let b = report
        .benchmarks
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("one benchmark: {}", run.stderr));
    (run, b)
}

/// Each hostile answer is an errored request that names what went wrong (never a hang,
/// never a panic); a response whose end a `close_notify` says completes.
#[test]
fn a_hostile_https_server_errs_requests_with_a_reason() {
    let pki = Pki::new("hostile");
    for (mode, kind, says) in [
        (Hostile::PlainHttp, "connect", "did not answer with TLS"),
        (Hostile::Garbage, "connect", "did not answer with TLS"),
        (Hostile::Alert, "connect", "HandshakeFailure"),
        (Hostile::CutMidStream, "stream_broken", "close_notify"),
    ] {
        let (url, _) = hostile(&pki, mode);
        let (run, b) = against_hostile(&url, &pki, 2, "prompt_tokens=16,output_tokens=4");
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        assert_eq!(
            (b.requests.completed, b.requests.errored),
            (0, 2),
            "{mode:?}: {:?}",
            b.errors
        );
        let e = &b.errors[0];
        let sample = e.samples.first().cloned().unwrap_or_default();
        assert_eq!(e.kind, kind, "{mode:?}: {sample}");
        assert!(
            sample.contains(says),
            "{mode:?}: {says:?} not in {sample:?}"
        );
    }
    let (url, _) = hostile(&pki, Hostile::CloseNotifyEnds);
    let (run, b) = against_hostile(&url, &pki, 2, "prompt_tokens=16,output_tokens=4");
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(b.requests.completed, 2, "{:?}", b.errors);
}

/// `--http2` on `https://` needs the server to choose `h2` by ALPN, as its requests do: a
/// server of HTTP/1.1 over TLS (which chooses no protocol) stops the run at its check,
/// naming the fix, and gets no request (not one failed request after another).
#[test]
fn http2_to_an_https_server_of_http1_only_stops_at_the_check_saying_drop_http2() {
    let pki = Pki::new("h1only");
    let (url, posts) = hostile(&pki, Hostile::CloseNotifyEnds);
    let run = Bench::target(&url)
        .model("m")
        .arg("--ca-cert", pki.ca())
        .arg("--server-metrics", "off")
        .flag("--http2")
        .max_requests(2)
        .data("prompt_tokens=16,output_tokens=4")
        .run();
    let error = crate::support::usage_error(&run);
    assert!(
        error.contains("it chose no protocol by ALPN") && error.contains("drop --http2"),
        "{error}"
    );
    assert_eq!(posts.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// A kept-alive HTTPS connection the server closes as the next request arrives (its
/// body unread): the request is sent once more on a fresh connection, counted, as on
/// plain HTTP (tests/engine/misbehaving.rs).
#[test]
fn a_reused_https_connection_reset_unread_costs_one_counted_resend() {
    let pki = Pki::new("resend");
    let (url, posts) = hostile(&pki, Hostile::ResetSecond);
    // A body far larger than what the server's first reads take in with the head.
    let (run, b) = against_hostile(&url, &pki, 5, "prompt_tokens=40000,output_tokens=4");
    assert_eq!(run.code(), 0, "{}", run.stderr);
    assert_eq!(
        (b.requests.completed, b.requests.errored),
        (5, 0),
        "{:?}",
        b.errors
    );
    // The first request once, every later one twice: cut on the reused connection,
    // answered on a fresh one.
    assert_eq!(posts.load(std::sync::atomic::Ordering::SeqCst), 9);
    assert_eq!(b.requests.resent, 4);
}
