//! TLS for the worker's own HTTP/1.1 client ([`crate::http1`]): rustls driven sans-IO
//! over the connection's own socket.
//!
//! Why not tokio-rustls (or hyper-rustls through reqwest): a buffered rustls connection
//! keeps a 4 KiB read buffer for good once it has read, and a queue for plaintext and one
//! for ciphertext; with hyper's buffers on top an open HTTPS stream cost ~31 KB
//! (docs/performance.md). Here rustls's unbuffered connection decrypts records out of a
//! buffer the connection owns, which exists only while a record's bytes are in flight
//! (a token's record is read, decrypted and dropped; a stream waiting for its next token
//! holds none), and ciphertext to write exists only until the socket took it.
//!
//! Ciphertext is read with [`rx_time::try_read`] (`recvmsg`, with the kernel's receive
//! stamp): the plaintext a read completes carries that read's stamp, so the instants of
//! tokens over TLS are the kernel's, as on plain HTTP.
//!
//! A TLS 1.3 server sends session tickets after the handshake: an idle pooled connection
//! may be readable without being closed. They are processed here (and kept by rustls's
//! resumption store: the next handshake is shorter); a `close_notify`, an EOF, an alert
//! or unsolicited data mean the connection is done.

use crate::rx_time;
use bytes::{Buf, BytesMut};
use llmsurge_proto::MonoNanos;
use llmsurge_proto::http::TlsConfig;
use rustls::client::UnbufferedClientConnection;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::io;
use std::sync::Arc;
use tokio::net::TcpStream;

/// The least room a ciphertext read is given (one SSE event's record fits many times).
const READ_MIN: usize = 1 << 10;
/// Plaintext encrypted per record: TLS's most.
const RECORD_MAX: usize = 16 << 10;
/// What a record adds to its plaintext, at most (header, nonce, tag, content type).
const RECORD_OVERHEAD: usize = 64;

/// The client settings of one backend: verification (`--ca-cert` beside the system's
/// roots, which honour `SSL_CERT_FILE`; or `--insecure`), the client identity of mutual
/// TLS, ALPN `h2` with `http2` (for [`crate::http2`]) else `http/1.1`, ring's crypto. The
/// same verifier as reqwest's.
pub fn client_config(tls: &TlsConfig, http2: bool) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| format!("TLS settings: {e}"))?;
    let builder = if tls.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerifier(Arc::clone(&provider))))
    } else {
        let roots = match &tls.ca_cert {
            None => Vec::new(),
            Some(path) => CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--ca-cert {}: {e}", path.display()))?,
        };
        let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(roots, provider)
            .map_err(|e| format!("TLS roots: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
    };
    let mut config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--client-cert {}: {e}", cert.display()))?;
            // The key's contents are never shown, only where it is.
            let private = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--client-key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, private)
                .map_err(|e| format!("--client-key {}: {e}", key.display()))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(Arc::new(config))
}

/// The server name a URL's host (`Url::host_str`) is checked against: an IP address
/// (IPv6 in brackets, as URLs write it) as one, else a DNS name.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_string())
        .map_err(|e| format!("host {host:?} is no TLS server name: {e}"))
}

/// `--insecure`: every certificate is taken (the CLI warns, the report says so).
#[derive(Debug)]
struct NoVerifier(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerifier {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why a handshake failed.
#[derive(Debug)]
pub enum HandshakeError {
    /// The socket failed or closed.
    Io(io::Error),
    /// TLS refused it (a certificate, an alert, bytes that are not TLS).
    Tls(rustls::Error),
}

impl HandshakeError {
    /// One line: what a user can act on said as the target check says it.
    pub fn message(&self) -> String {
        match self {
            HandshakeError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                "TLS handshake: the server closed the connection".into()
            }
            HandshakeError::Io(e) => format!("TLS handshake: {e}"),
            HandshakeError::Tls(e) => match llmsurge_proto::http::tls_problem(e) {
                Some(problem) => problem.line(),
                None => format!("TLS handshake: {e}"),
            },
        }
    }
}

/// The TLS session of one connection.
pub struct Tls {
    conn: UnbufferedClientConnection,
    /// Ciphertext read and not yet processed (a record's first bytes); no allocation
    /// while none is.
    incoming: BytesMut,
    /// Ciphertext not yet written; no allocation while none is.
    outgoing: BytesMut,
    /// Bytes of the request whose ciphertext is in `outgoing` (see [`Self::try_write`]).
    owed: usize,
    /// The server sent `close_notify`: no more data comes.
    peer_closed: bool,
    /// The session failed (rustls must not be driven after a fatal error: it asserts).
    failed: Option<rustls::Error>,
    /// When the bytes of the last ciphertext read arrived (what its records' plaintext
    /// carries when handed out later).
    arrived: MonoNanos,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("incoming", &self.incoming.len())
            .field("outgoing", &self.outgoing.len())
            .finish_non_exhaustive()
    }
}

/// What processing the buffered ciphertext left.
enum Step {
    /// More ciphertext is needed (a record's rest, or the server's next flight).
    NeedMore,
    /// The handshake is done and nothing is left to process.
    Ready,
    /// The server sent `close_notify`.
    Closed,
}

impl Tls {
    /// A client session to `name`.
    pub fn new(
        config: &Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        Ok(Self {
            conn: UnbufferedClientConnection::new(Arc::clone(config), name)?,
            incoming: BytesMut::new(),
            outgoing: BytesMut::new(),
            owed: 0,
            peer_closed: false,
            failed: None,
            arrived: MonoNanos::now(),
        })
    }

    /// Runs the handshake on `stream` (not bounded in time here: the caller's connect
    /// timeout bounds it).
    pub async fn handshake(&mut self, stream: &TcpStream) -> Result<(), HandshakeError> {
        let mut sink = BytesMut::new();
        loop {
            let step = match self.process(&mut sink) {
                Ok(step) => step,
                Err(e) => {
                    // The alert rustls queued saying why, as far as the socket takes it.
                    let _ = self.flush(stream);
                    return Err(HandshakeError::Tls(e));
                }
            };
            while !self.outgoing.is_empty() {
                match self.flush(stream) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        stream.writable().await.map_err(HandshakeError::Io)?;
                    }
                    Err(e) => return Err(HandshakeError::Io(e)),
                    Ok(()) => {}
                }
            }
            match step {
                Step::Ready => return Ok(()),
                Step::Closed => {
                    return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into()));
                }
                Step::NeedMore => {}
            }
            stream.readable().await.map_err(HandshakeError::Io)?;
            self.incoming.reserve(READ_MIN);
            match rx_time::try_read(stream, &mut self.incoming) {
                Ok((0, _)) => return Err(HandshakeError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok((_, at)) => self.arrived = at,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(HandshakeError::Io(e)),
            }
        }
    }

    /// Processes the buffered ciphertext: the plaintext of its whole records goes into
    /// `plain`, what TLS has to send (an alert, a key update's answer) into `outgoing`.
    fn process(&mut self, plain: &mut BytesMut) -> Result<Step, rustls::Error> {
        let result = self.process_records(plain);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn process_records(&mut self, plain: &mut BytesMut) -> Result<Step, rustls::Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            let UnbufferedStatus { mut discard, state } =
                self.conn.process_tls_records(&mut self.incoming[..]);
            let mut result = None;
            match state {
                Err(e) => result = Some(Err(e)),
                Ok(ConnectionState::ReadTraffic(mut read)) => {
                    while let Some(record) = read.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                plain.extend_from_slice(record.payload);
                            }
                            Err(e) => {
                                result = Some(Err(e));
                                break;
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    encode_into(&mut self.outgoing, &mut encode);
                }
                // Queued in `outgoing`, which is written before any later byte.
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                    self.peer_closed = true;
                    result = Some(Ok(Step::Closed));
                }
                Ok(ConnectionState::WriteTraffic(_)) => result = Some(Ok(Step::Ready)),
                Ok(ConnectionState::BlockedHandshake) => result = Some(Ok(Step::NeedMore)),
                // Early data is the server's; anything new: wait for more bytes.
                Ok(_) => result = Some(Ok(Step::NeedMore)),
            }
            self.incoming.advance(discard.min(self.incoming.len()));
            if self.incoming.is_empty() {
                // A stream waiting for its next record holds no buffer.
                self.incoming = BytesMut::new();
            }
            if let Some(result) = result {
                return result;
            }
        }
    }

    /// Writes what ciphertext is queued, without waiting: `WouldBlock` while some is left.
    fn flush(&mut self, stream: &TcpStream) -> io::Result<()> {
        while !self.outgoing.is_empty() {
            match stream.try_write(&self.outgoing) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.outgoing.advance(n),
                Err(e) => return Err(e),
            }
        }
        self.outgoing = BytesMut::new();
        Ok(())
    }

    /// Sends the bytes `from..upto` of `parts` (the request), as far as the socket takes
    /// them now: how many more of its bytes are on the wire (all of a record's, once the
    /// socket took the record whole), `WouldBlock` while a record waits for room. The
    /// caller passes the count of bytes it was told are sent as `from`.
    pub fn try_write(
        &mut self,
        stream: &TcpStream,
        parts: &[&[u8]; 3],
        from: usize,
        upto: usize,
    ) -> io::Result<usize> {
        loop {
            self.flush(stream)?;
            if self.owed > 0 {
                return Ok(std::mem::take(&mut self.owed));
            }
            if from >= upto {
                return Ok(0);
            }
            self.encrypt(parts, from, upto)?;
        }
    }

    /// HTTP/2's write ([`crate::http2`], whose frames are queued by several paths, so
    /// the count it is told must be final at once): writes the ciphertext still queued,
    /// then encrypts up to one record of `parts[..upto]` and hands it to the socket as far
    /// as it takes it. Returns how many of those bytes are now the session's (on the
    /// wire, or queued to go before anything else); `WouldBlock` while earlier
    /// ciphertext waits for room. With `upto` 0 it only writes what is queued.
    pub fn write_queued(
        &mut self,
        stream: &TcpStream,
        parts: &[&[u8]; 3],
        upto: usize,
    ) -> io::Result<usize> {
        self.flush(stream)?;
        if upto == 0 {
            return Ok(0);
        }
        self.encrypt(parts, 0, upto)?;
        let taken = std::mem::take(&mut self.owed);
        match self.flush(stream) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(taken),
        }
    }

    /// Whether no ciphertext waits for room in the socket.
    pub fn nothing_queued(&self) -> bool {
        self.outgoing.is_empty()
    }

    /// The protocol the server chose by ALPN, once the handshake is done.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Encrypts the next record's worth of the request into `outgoing`.
    fn encrypt(&mut self, parts: &[&[u8]; 3], from: usize, upto: usize) -> io::Result<()> {
        if let Some(e) = &self.failed {
            return Err(tls_io_error(e.clone()));
        }
        let end = upto.min(from + RECORD_MAX);
        let mut piece = Vec::with_capacity(end - from);
        for s in crate::parts::slices(parts, from, end) {
            piece.extend_from_slice(&s);
        }
        loop {
            let UnbufferedStatus { state, .. } = self.conn.process_tls_records(&mut []);
            match state {
                Ok(ConnectionState::WriteTraffic(mut write)) => {
                    let mut room = piece.len() + RECORD_OVERHEAD;
                    loop {
                        let at = self.outgoing.len();
                        self.outgoing.resize(at + room, 0);
                        match write.encrypt(&piece, &mut self.outgoing[at..]) {
                            Ok(n) => {
                                self.outgoing.truncate(at + n);
                                self.owed = piece.len();
                                return Ok(());
                            }
                            Err(EncryptError::InsufficientSize(need)) => {
                                self.outgoing.truncate(at);
                                room = need.required_size;
                            }
                            Err(e) => {
                                self.outgoing.truncate(at);
                                return Err(io::Error::other(format!("TLS: {e}")));
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    encode_into(&mut self.outgoing, &mut encode);
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                    self.peer_closed = true;
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the server closed the TLS session (close_notify)",
                    ));
                }
                Ok(_) => {
                    // Plaintext or a record unprocessed: the reads see to it; the
                    // request cannot go out on this session now.
                    return Err(io::Error::other("TLS: session not ready to send"));
                }
                Err(e) => {
                    self.failed = Some(e.clone());
                    return Err(tls_io_error(e));
                }
            }
        }
    }

    /// Reads what the socket holds now (`recv`: [`rx_time::try_read`], or a raw read that
    /// does not touch tokio's readiness) into the session and hands out the plaintext it
    /// completes into `plain`: how many bytes, and when the read that completed them got
    /// its bytes. `Ok(0)` after the server's `close_notify`; an error of kind
    /// `UnexpectedEof` for an EOF without one (a cut response), `WouldBlock` when the
    /// socket is empty and no plaintext came.
    pub fn read_with(
        &mut self,
        stream: &TcpStream,
        plain: &mut BytesMut,
        want: usize,
        recv: fn(&TcpStream, &mut BytesMut) -> io::Result<(usize, MonoNanos)>,
    ) -> io::Result<(usize, MonoNanos)> {
        let before = plain.len();
        loop {
            let step = self.process(plain).map_err(tls_io_error)?;
            // Best effort: what TLS owes the server goes with the next request otherwise.
            let _ = self.flush(stream);
            if plain.len() > before {
                return Ok((plain.len() - before, self.arrived));
            }
            if matches!(step, Step::Closed) || self.peer_closed {
                return Ok((0, MonoNanos::now()));
            }
            self.incoming.reserve(want.max(READ_MIN));
            match recv(stream, &mut self.incoming) {
                Ok((0, _)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection without a TLS close_notify",
                    ));
                }
                Ok((_, at)) => self.arrived = at,
                Err(e) => {
                    if self.incoming.is_empty() {
                        self.incoming = BytesMut::new();
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Whether an idle session is still usable: session tickets the server sent are
    /// taken in; a `close_notify`, an EOF, an alert or data nobody asked for mean no.
    /// Reads without tokio's readiness (which only the runtime updates), from any thread.
    pub fn still_open(&mut self, stream: &TcpStream) -> bool {
        let mut plain = BytesMut::new();
        match self.read_with(stream, &mut plain, READ_MIN, rx_time::recv_now) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }
}

/// Appends a handshake (or alert, key update) record rustls has to send to `outgoing`.
fn encode_into<Data>(
    outgoing: &mut BytesMut,
    encode: &mut rustls::unbuffered::EncodeTlsData<'_, Data>,
) {
    let mut room = 2 * READ_MIN;
    loop {
        let at = outgoing.len();
        outgoing.resize(at + room, 0);
        match encode.encode(&mut outgoing[at..]) {
            Ok(n) => {
                outgoing.truncate(at + n);
                return;
            }
            Err(EncodeError::InsufficientSize(need)) => {
                outgoing.truncate(at);
                room = need.required_size;
            }
            Err(EncodeError::AlreadyEncoded) => {
                outgoing.truncate(at);
                return;
            }
        }
    }
}

/// A TLS failure while reading or writing, as the one-line I/O error a request's
/// message carries: an alert is named.
fn tls_io_error(e: rustls::Error) -> io::Error {
    let message = match &e {
        rustls::Error::AlertReceived(alert) => format!("TLS alert from the server: {alert:?}"),
        other => format!("TLS: {other}"),
    };
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rx_time::tests::{CLOCK_READS_SLACK_NS, stamps_live};
    use crate::rx_time::wait_until_taken;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// A TLS server (rustls's buffered connection, blocking) on the server end of a
    /// stamped pair, with a throwaway self-signed certificate; the client's session,
    /// handshake done (`--insecure`: the point is the reads, not the verification).
    async fn tls_pair() -> (
        TcpStream,
        Tls,
        rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
    ) {
        let (client, server) = stamps_live().await;
        let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![key.cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into()),
            )
            .expect("a server config");
        let server = server.into_std().expect("std socket");
        server.set_nonblocking(false).expect("blocking");
        let accepting = std::thread::spawn(move || {
            let mut conn = rustls::ServerConnection::new(Arc::new(config)).expect("server");
            let mut sock = server;
            while conn.is_handshaking() {
                conn.complete_io(&mut sock).expect("server handshake");
            }
            // The session tickets (TLS 1.3) go out now, before any data.
            while conn.wants_write() {
                conn.complete_io(&mut sock).expect("server tickets");
            }
            rustls::StreamOwned::new(conn, sock)
        });
        let insecure = TlsConfig {
            insecure: true,
            ..TlsConfig::default()
        };
        let config = client_config(&insecure, false).expect("a client config");
        let mut tls =
            Tls::new(&config, server_name("localhost").expect("a name")).expect("session");
        tls.handshake(&client).await.expect("handshake");
        let server = accepting.join().expect("server thread");
        (client, tls, server)
    }

    /// Plaintext over TLS carries the kernel's receive stamp of the read that brought
    /// its record, not the instant the read ran (as a plain read does, rx_time.rs).
    #[tokio::test]
    async fn a_tls_read_carries_the_instant_its_bytes_arrived_not_its_own() {
        let (client, mut tls, mut server) = tls_pair().await;
        // Session tickets may still be on the way: taken in before the timed write.
        let mut plain = BytesMut::new();
        let _ = tls.read_with(&client, &mut plain, READ_MIN, rx_time::recv_now);
        assert!(plain.is_empty());

        let before = MonoNanos::now();
        server.write_all(b"data: one token\n\n").expect("loopback");
        server.flush().expect("loopback");
        wait_until_taken(server.sock.as_raw_fd());
        // The reader comes late, as a runtime thread busy with other streams does.
        let came = MonoNanos::now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (n, at) = loop {
            client.readable().await.expect("loopback");
            match tls.read_with(&client, &mut plain, READ_MIN, rx_time::try_read) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => break other.expect("a record"),
            }
        };
        assert_eq!(&plain[..n], b"data: one token\n\n");
        assert!(
            before.0.saturating_sub(CLOCK_READS_SLACK_NS) <= at.0
                && at.0 < came.0 + CLOCK_READS_SLACK_NS,
            "stamp {at:?} not between the write ({before:?}) and the reader's coming ({came:?})"
        );
        // A waiting session holds no buffer.
        assert_eq!((tls.incoming.capacity(), tls.outgoing.capacity()), (0, 0));
    }

    /// A `close_notify` is the end; an EOF without one is an error that says so; an idle
    /// session with tickets waiting is still open.
    #[tokio::test]
    async fn close_notify_ends_and_a_bare_eof_is_an_error() {
        let (client, mut tls, mut server) = tls_pair().await;
        assert!(tls.still_open(&client), "tickets are no close");
        server.conn.send_close_notify();
        server.conn.complete_io(&mut server.sock).expect("loopback");
        wait_until_taken(server.sock.as_raw_fd());
        let mut plain = BytesMut::new();
        let read = tls.read_with(&client, &mut plain, READ_MIN, rx_time::recv_now);
        assert_eq!(read.expect("the end").0, 0);
        assert!(!tls.still_open(&client));

        let (client, mut tls, server) = tls_pair().await;
        drop(server);
        client.readable().await.expect("loopback");
        let err = loop {
            match tls.read_with(&client, &mut plain, READ_MIN, rx_time::recv_now) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    client.readable().await.expect("loopback");
                }
                other => break other.expect_err("a cut session"),
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(err.to_string().contains("close_notify"), "{err}");
    }
}
