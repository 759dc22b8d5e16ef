//! A tiny OpenAI-compatible server that records every request body, so a test can
//! re-encode exactly what the real `llmsurge` binary sent (HTTP/1.1 keep-alive,
//! non-streamed answers, 127.0.0.1 on an ephemeral port).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The recording server; stops when dropped.
pub struct Capture {
    addr: std::net::SocketAddr,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    stop: Arc<AtomicBool>,
}

impl Capture {
    pub fn start() -> Capture {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (bodies.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let b = b.clone();
                std::thread::spawn(move || serve(conn, &b));
            }
        });
        Capture { addr, bodies, stop }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The chat request bodies received so far, in arrival order.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.bodies.lock().expect("lock").clone()
    }

    /// The text of each request's last user message.
    pub fn prompts(&self) -> Vec<String> {
        self.bodies()
            .iter()
            .map(|b| {
                b["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .and_then(|m| m["content"].as_str())
                    .expect("a chat body with messages")
                    .to_string()
            })
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, bodies: &Mutex<Vec<serde_json::Value>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        // llmsurge's pre-run probe is not one of the run's requests.
        let mut probe = false;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
                probe |= k.eq_ignore_ascii_case(llmsurge::mock::PROBE_HEADER);
            }
        }
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = if request_line.starts_with("GET /v1/models") {
            r#"{"object":"list","data":[{"id":"capture","object":"model"}]}"#.to_string()
        } else if request_line.starts_with("POST /v1/chat/completions") {
            if let (Ok(v), false) = (serde_json::from_slice(&body), probe) {
                bodies.lock().expect("lock").push(v);
            }
            r#"{"id":"c","object":"chat.completion","created":0,"model":"capture","choices":[{"index":0,"message":{"role":"assistant","content":" ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#.to_string()
        } else {
            String::new()
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        if writer.write_all(head.as_bytes()).is_err()
            || writer.write_all(answer.as_bytes()).is_err()
        {
            return;
        }
    }
}
