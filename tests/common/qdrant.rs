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
    grpc: u16,
    /// Distributed mode: this node's peer-to-peer port and how it joins (`--uri` for the
    /// first node, `--bootstrap` for the others).
    p2p: Option<(u16, Vec<String>)>,
    storage: Option<tempfile::TempDir>,
}

impl Server {
    /// `QDRANT_URL` when set, else a fresh server of its own.
    pub fn start() -> Server {
        if let Ok(url) = std::env::var("QDRANT_URL") {
            let base = url.trim_end_matches('/').split('/').take(3).collect::<Vec<_>>().join("/");
            return Server { child: None, url: base, http: 0, grpc: 0, p2p: None, storage: None };
        }
        Server::spawn(None)
    }

    fn spawn(p2p: Option<(u16, Vec<String>)>) -> Server {
        let storage = tempfile::tempdir().expect("a storage folder");
        let (http, grpc) = (free_port(), free_port());
        let mut s = Server { child: None, url: format!("qdrant://127.0.0.1:{grpc}"), http, grpc, p2p, storage: Some(storage) };
        s.restart();
        s
    }

    /// Starts the server (again, after [`kill`](Self::kill)) on its ports and storage, and
    /// waits until it is ready.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server on port {} is running", self.http);
        let dir = self.storage.as_ref().expect("a server of the tests' own").path().to_path_buf();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("server.log")).expect("server log");
        let mut cmd = Command::new(binary());
        cmd.current_dir(&dir)
            .env("QDRANT__SERVICE__HOST", "127.0.0.1")
            .env("QDRANT__SERVICE__HTTP_PORT", self.http.to_string())
            .env("QDRANT__SERVICE__GRPC_PORT", self.grpc.to_string())
            .env("QDRANT__STORAGE__STORAGE_PATH", dir.join("storage"))
            .env("QDRANT__TELEMETRY_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        if let Some((p2p, join)) = &self.p2p {
            cmd.env("QDRANT__CLUSTER__ENABLED", "true").env("QDRANT__CLUSTER__P2P__PORT", p2p.to_string()).args(join);
        }
        self.child = Some(cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", binary().display())));
        self.wait_ready();
    }

    /// SIGKILL, as a crash or a pulled plug would stop it: the storage stays for a restart.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
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
        panic!("the Qdrant server on port {} was not ready within 60 s; its log:\n{}", self.http, self.log());
    }

    /// The server's own log so far.
    pub fn log(&self) -> String {
        self.storage.as_ref().and_then(|d| std::fs::read_to_string(d.path().join("server.log")).ok()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A cluster of `n` nodes in Qdrant's distributed mode on loopback: the first started
/// with `--uri`, the others bootstrapping from it, ready when every node answers `/readyz`
/// and the first one lists them all as peers.
pub fn cluster(n: usize) -> Vec<Server> {
    let first_p2p = free_port();
    let first = Server::spawn(Some((first_p2p, vec!["--uri".into(), format!("http://127.0.0.1:{first_p2p}")])));
    let mut nodes = vec![first];
    for _ in 1..n {
        let p2p = free_port();
        let join = vec!["--bootstrap".into(), format!("http://127.0.0.1:{first_p2p}"), "--uri".into(), format!("http://127.0.0.1:{p2p}")];
        nodes.push(Server::spawn(Some((p2p, join))));
    }
    let t0 = Instant::now();
    loop {
        let peers = get(nodes[0].http, "/cluster").map(|r| r.matches("\"uri\"").count()).unwrap_or(0);
        if peers >= n {
            return nodes;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the cluster did not form within 60 s: {:?}", get(nodes[0].http, "/cluster"));
        std::thread::sleep(Duration::from_millis(200));
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
