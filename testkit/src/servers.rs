//! Real servers the integration tests drive: `llama-server` (CPU, SmolLM2-135M) on a free
//! loopback port, and a TLS-terminating proxy in front of any loopback port. Written once here
//! so that every crate's tests start the engine the same way and wait for it the same bounded
//! time.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long `llama-server` may take to load the model and answer `/health`.
const LLAMA_READY: Duration = Duration::from_secs(120);

/// A running `llama-server`, killed (and reaped) when dropped.
pub struct LlamaServer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    /// Keeps a temporary log file alive when the caller gave no path.
    _tmp: Option<tempfile_guard::Guard>,
}

mod tempfile_guard {
    /// Removes a directory on drop (the testkit has no tempfile dependency of its own).
    pub struct Guard(pub std::path::PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl LlamaServer {
    /// Starts `llama-server` with the test model on a free port, `-c 2048 -np 2` and `extra`
    /// arguments, its stderr in `log` (a fresh temporary file when `None`); waits until
    /// `/health` answers 200, or panics after two minutes with the log's tail.
    pub fn start(extra: &[&str], log: Option<&Path>) -> LlamaServer {
        let ll = crate::llama_cpp();
        let port = crate::free_port();
        let (log, tmp) = match log {
            Some(p) => (p.to_path_buf(), None),
            None => {
                let dir = std::env::temp_dir()
                    .join(format!("fleetbench-llama-{}-{port}", std::process::id()));
                std::fs::create_dir_all(&dir).expect("log directory");
                (dir.join("llama.log"), Some(tempfile_guard::Guard(dir)))
            }
        };
        let child = Command::new(&ll.server)
            .arg("-m")
            .arg(&ll.model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-c", "2048", "-np", "2"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn llama-server");
        let server = LlamaServer {
            child,
            port,
            log,
            _tmp: tmp,
        };
        let t = Instant::now();
        while !health(port) {
            assert!(
                t.elapsed() < LLAMA_READY,
                "llama-server not healthy within {LLAMA_READY:?}:\n{}",
                server.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A counter or gauge of the server's `/metrics` (it must run with `--metrics`); panics
    /// with the page when the name is not there.
    pub fn metric(&self, name: &str) -> f64 {
        let mut s =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect for /metrics");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .expect("send /metrics");
        let mut buf = String::new();
        s.read_to_string(&mut buf).expect("read /metrics");
        buf.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{buf}"))
    }

    /// The last 60 lines of the server's log (for assertion messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of every sample of `name` on a loopback server's `/metrics` (all label sets: a
/// counter per model or rank); panics with the page when there is none.
pub fn metric_sum(port: u16, name: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for /metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("send /metrics");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("read /metrics");
    let values: Vec<f64> = buf
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(!values.is_empty(), "{name} not in /metrics:\n{buf}");
    values.iter().sum()
}

/// Whether `GET /health` on the loopback port answers 200 (llama-server answers 401 to other
/// paths when started with `--api-key`, but `/health` stays open).
pub fn health(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

/// A TLS-terminating proxy on loopback: TLS from the client with `cert`/`key` (PEM), plain
/// TCP to `upstream` on 127.0.0.1. Runs on its own runtime thread for the process's life;
/// returns its port.
pub fn start_tls_proxy(cert: &Path, key: &Path, upstream: u16) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("cert")
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends here, as it should.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
    });
    port
}
