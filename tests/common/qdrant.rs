//! A real Qdrant server for the tests: the 1.18.3 binary in `../shared/qdrant/`, unpacked
//! once into the cache, started on free loopback ports with a storage folder of its own,
//! ready when `/readyz` answers, and killed by its PID when the test's `Server` is dropped
//! (also when the test panics). `QDRANT_URL=qdrant://host:6334` points the tests at an
//! external server instead.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server version the tests run against (the client is pinned within one minor
/// version of it).
pub const VERSION: &str = "1.18.3";

/// The unpacked binary's size, which tells a complete unpack from one cut short.
const SIZE: u64 = 105_189_984;

pub struct Server {
    child: Option<Child>,
    /// `qdrant://host:port` of the gRPC endpoint.
    pub url: String,
    pub http: u16,
    _storage: Option<tempfile::TempDir>,
}

impl Server {
    /// `QDRANT_URL` when set, else a fresh server of its own.
    pub fn start() -> Server {
        if let Ok(url) = std::env::var("QDRANT_URL") {
            let base = url.trim_end_matches('/').split('/').take(3).collect::<Vec<_>>().join("/");
            return Server { child: None, url: base, http: 0, _storage: None };
        }
        let bin = binary();
        let storage = tempfile::tempdir().expect("a storage folder");
        let (http, grpc) = (free_port(), free_port());
        let log = std::fs::File::create(storage.path().join("server.log")).expect("server log");
        let child = Command::new(&bin)
            .current_dir(storage.path())
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", http.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", grpc.to_string())
            .env("QDRANT__STORAGE__STORAGE_PATH", storage.path().join("storage"))
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let s = Server { child: Some(child), url: format!("qdrant://127.0.0.1:{grpc}"), http, _storage: Some(storage) };
        s.wait_ready();
        s
    }

    /// A location for a collection of its own on this server.
    pub fn collection(&self, name: &str) -> String {
        format!("{}/{name}_{}_{}", self.url, std::process::id(), alphaloop::kb::record::now())
    }

    fn wait_ready(&self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if get(self.http, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = self._storage.as_ref().and_then(|d| std::fs::read_to_string(d.path().join("server.log")).ok()).unwrap_or_default();
        panic!("the Qdrant server on port {} was not ready within 60 s; its log:\n{log}", self.http);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The server binary, unpacked from `../shared/qdrant/qdrant.xz` into the cache on first use.
fn binary() -> PathBuf {
    let cache = std::env::var_os("ALPHALOOP_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/alphaloop"));
    let dir = cache.join("qdrant").join(VERSION);
    let bin = dir.join("qdrant");
    if std::fs::metadata(&bin).is_ok_and(|m| m.len() == SIZE) {
        return bin;
    }
    let xz = super::shared("qdrant/qdrant.xz");
    assert!(xz.exists(), "the server tests need the Qdrant {VERSION} binary at {} (../shared/qdrant/ beside the repository)", xz.display());
    std::fs::create_dir_all(&dir).expect("cache folder");
    // Several test binaries may unpack at once: each into a file of its own, renamed into place.
    let part = dir.join(format!("qdrant.{}.part", std::process::id()));
    let out = std::fs::File::create(&part).expect("unpack target");
    let st = Command::new("xz").arg("-dc").arg(&xz).stdout(out).status().expect("xz runs");
    assert!(st.success(), "unpacking {} failed", xz.display());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&part, &bin).expect("into place");
    assert_eq!(std::fs::metadata(&bin).map(|m| m.len()).ok(), Some(SIZE), "{} is not the expected binary", bin.display());
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A plain HTTP GET on loopback: the response, or None while the server is not up.
pub fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
