//! The worker process (`alphaloop sandbox-worker DIR`): embeds CPython through pyo3, maps
//! the panels, confines itself, then runs one factor program per request.
//!
//! Order matters. Landlock comes first, while the process has a single thread (it confines
//! the calling thread and every thread started later): reads only under the interpreter's
//! home, the system libraries and the panels, reads and writes only in the scratch dir, no TCP. Python, numpy,
//! pandas (and polars when installed) then load under it. Then seccomp, on all threads,
//! refuses sockets, new processes, exec, rlimit changes, ptrace, namespaces and mounts.
//! Only then is the first program read.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyModule};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{BufRead, Write};
use std::os::fd::FromRawFd;
use std::path::Path;

const WORKER_PY: &str = include_str!("../../sandbox/python/alphaloop_worker.py");
const FACTOR_PY: &str = include_str!("../../templates/python/alphaloop_factor.py");

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// Runs the worker until its input closes; returns the exit code.
pub fn main(root: &Path) -> i32 {
    // The protocol keeps the original stdout; anything the program prints goes to a log
    // file in the scratch dir (bounded by RLIMIT_FSIZE), so it cannot corrupt the frames.
    // SAFETY: plain descriptor calls on descriptors this process owns.
    let proto = unsafe {
        let fd = libc::dup(1);
        let log = cstr(&root.join("work/output.log").to_string_lossy());
        let out = libc::open(log.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o600);
        if fd < 0 || out < 0 {
            return 3;
        }
        libc::dup2(out, 1);
        libc::dup2(out, 2);
        libc::close(out);
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        std::fs::File::from_raw_fd(fd)
    };
    let mut proto = std::io::BufWriter::with_capacity(1 << 20, proto);
    // Landlock first, while this process has one thread (it confines the calling thread
    // and everything started after it): Python, numpy, pandas and polars then load under it.
    let landlock = match landlock(root, python_home()) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(proto, "{}", json!({"ready": false, "message": format!("landlock: {e}")}));
            let _ = proto.flush();
            return 4;
        }
    };
    Python::initialize();
    let code = Python::attach(|py| match serve(py, root, &landlock, &mut proto) {
        Ok(()) => 0,
        Err(msg) => {
            let _ = writeln!(proto, "{}", json!({"ready": false, "message": msg}));
            let _ = proto.flush();
            4
        }
    });
    code
}

/// The interpreter's home, found at build time (`sys.base_prefix` of the Python pyo3 built
/// against): the one tree the worker may read code from.
fn python_home() -> &'static str {
    env!("ALPHALOOP_PYTHON_HOME")
}

fn serve(py: Python<'_>, root: &Path, landlock: &str, proto: &mut impl Write) -> Result<(), String> {
    let pyerr = |e: PyErr| e.to_string();
    let factor = PyModule::from_code(py, &cstr(FACTOR_PY), c"alphaloop_factor.py", c"alphaloop_factor").map_err(pyerr)?;
    py.import("sys").and_then(|s| s.getattr("modules")).and_then(|m| m.set_item("alphaloop_factor", factor)).map_err(pyerr)?;
    let harness = PyModule::from_code(py, &cstr(WORKER_PY), c"alphaloop_worker.py", c"alphaloop_worker").map_err(pyerr)?;
    harness.getattr("setup").and_then(|f| f.call1((root.to_string_lossy().to_string(),))).map_err(pyerr)?;
    seccomp().map_err(|e| format!("seccomp: {e}"))?;
    let netns = std::fs::read_to_string("/proc/self/net/dev").map(|s| s.lines().skip(2).all(|l| l.trim_start().starts_with("lo:"))).unwrap_or(false);
    let ready = json!({"ready": true, "landlock": landlock, "seccomp": true, "netns": netns});
    writeln!(proto, "{ready}").and_then(|_| proto.flush()).map_err(|e| e.to_string())?;

    let run = harness.getattr("run_json").map_err(pyerr)?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let req: Value = serde_json::from_str(&line).map_err(|e| format!("bad request: {e}"))?;
        let args = (
            req["code"].as_str().unwrap_or(""),
            req["class"].as_str(),
            req["panel"].as_str().unwrap_or("real"),
            req["min_finite"].as_f64().unwrap_or(0.1),
        );
        let reply = run.call1(args).and_then(|r| r.extract::<(String, Option<Bound<'_, PyBytes>>)>());
        let ok = match reply {
            Ok((hdr, data)) => {
                writeln!(proto, "{hdr}").and_then(|_| match data {
                    Some(b) => proto.write_all(b.as_bytes()),
                    None => Ok(()),
                })
            }
            Err(e) => writeln!(proto, "{}", json!({"ok": false, "verdict": "error", "message": e.to_string()})),
        };
        if ok.and_then(|_| proto.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

/// Reads under the Python home and the panels, reads and writes in the scratch dir, no TCP.
fn landlock(root: &Path, home: &str) -> Result<String, String> {
    use landlock::{path_beneath_rules, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI};
    if home.is_empty() {
        return Err("the Python home was not found when alphaloop was built".into());
    }
    let abi = ABI::V4;
    // System shared libraries (numpy's extensions link libz, libm, ...) and the loader's
    // cache are readable too; nothing else under /etc, no home directories, no repo.
    let mut read_dirs: Vec<String> = vec![home.to_string()];
    for sys in ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/usr/share/zoneinfo"] {
        if Path::new(sys).exists() {
            read_dirs.push(sys.to_string());
        }
    }
    read_dirs.push(root.join("real").to_string_lossy().into());
    read_dirs.push(root.join("noise").to_string_lossy().into());
    read_dirs.push(root.join("meta.json").to_string_lossy().into());
    let work = root.join("work");
    let e = |x: landlock::RulesetError| x.to_string();
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(e)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(e)?
        .create()
        .map_err(e)?
        .add_rules(path_beneath_rules(&read_dirs, AccessFs::from_read(abi)))
        .map_err(e)?
        .add_rules(path_beneath_rules([work.as_path(), Path::new("/dev/null")], AccessFs::from_all(abi)))
        .map_err(e)?
        .restrict_self()
        .map_err(|e| e.to_string())?;
    Ok(format!("{:?}", status.ruleset))
}

fn seccomp() -> Result<(), String> {
    use seccompiler::{SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter, SeccompRule};
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(|e| format!("{e:?}"))?;
    let e = |x: seccompiler::BackendError| x.to_string();
    // clone3 says "not implemented", so libc falls back to clone, whose flags can be checked.
    let clone3: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, vec![])].into_iter().collect();
    let f1 = SeccompFilter::new(clone3, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch).map_err(e)?;
    let deny = [
        libc::SYS_socket, libc::SYS_socketpair, libc::SYS_connect, libc::SYS_bind, libc::SYS_listen, libc::SYS_accept,
        libc::SYS_accept4, libc::SYS_fork, libc::SYS_vfork, libc::SYS_execve, libc::SYS_execveat, libc::SYS_ptrace,
        libc::SYS_setrlimit, libc::SYS_prlimit64, libc::SYS_unshare, libc::SYS_setns, libc::SYS_mount, libc::SYS_umount2,
        libc::SYS_pivot_root, libc::SYS_chroot, libc::SYS_tkill, libc::SYS_process_vm_readv, libc::SYS_process_vm_writev,
        libc::SYS_bpf, libc::SYS_perf_event_open, libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key,
        libc::SYS_userfaultfd, libc::SYS_io_uring_setup, libc::SYS_reboot, libc::SYS_init_module, libc::SYS_finit_module,
        libc::SYS_delete_module, libc::SYS_kexec_load, libc::SYS_swapon, libc::SYS_swapoff, libc::SYS_sethostname,
        libc::SYS_setdomainname, libc::SYS_setuid, libc::SYS_setgid, libc::SYS_setreuid, libc::SYS_setregid,
        libc::SYS_setresuid, libc::SYS_setresgid, libc::SYS_capset, libc::SYS_setpriority, libc::SYS_pidfd_open,
        libc::SYS_pidfd_send_signal, libc::SYS_landlock_create_ruleset,
    ];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = deny.iter().map(|&s| (s, vec![])).collect();
    let pid = std::process::id() as u64;
    let rule = |c: Vec<Cond>| SeccompRule::new(c).map_err(e);
    let cond = |arg, len, op, v| Cond::new(arg, len, op, v).map_err(e);
    // new processes (clone without CLONE_THREAD); threads stay allowed
    rules.insert(libc::SYS_clone, vec![rule(vec![cond(0, Len::Qword, Op::MaskedEq(libc::CLONE_THREAD as u64), 0)?])?]);
    // signals to any process but this one
    rules.insert(libc::SYS_kill, vec![rule(vec![cond(0, Len::Dword, Op::Ne, pid)?])?]);
    rules.insert(libc::SYS_tgkill, vec![rule(vec![cond(0, Len::Dword, Op::Ne, pid)?])?]);
    let f2 = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch).map_err(e)?;
    for f in [f1, f2] {
        let prog: seccompiler::BpfProgram = f.try_into().map_err(e)?;
        seccompiler::apply_filter_all_threads(&prog).map_err(|x| x.to_string())?;
    }
    Ok(())
}
