"""The Python side of the sandbox worker (`alphaloop sandbox-worker DIR`).

The Rust worker embeds CPython, loads this module, calls `setup` once (panels are
memory-mapped .npy files written by the parent: no copy per request), then applies the
kernel restrictions (Landlock, seccomp) and calls `run` once per request.

Two layers stop hostile code. This module's audit hook names what was attempted
(network, process, file, ctypes, limits) so the verdict is readable, and records it even
if the code catches the exception. Behind it the kernel refuses the same actions
(seccomp: no sockets, no new processes, no exec, no rlimit changes; Landlock: reads only
under the interpreter's paths and the panels, writes only in the scratch dir), so code
that gets past the hook still cannot act.
"""

import json
import linecache
import os
import sys
import time
import traceback

import numpy as np
import pandas as pd

FILE = "factor.py"
_state = {}


class Violation(PermissionError):
    """Raised by the audit hook; `kind` is the verdict's detail."""

    def __init__(self, kind, detail):
        super().__init__(f"forbidden: {kind} ({detail})")
        self.kind = kind


def setup(root):
    """Maps the panels under `root` and installs the audit hook; returns the directories
    the worker must still be able to read (for lazy imports)."""
    with open(os.path.join(root, "meta.json")) as f:
        meta = json.load(f)
    panels = {}
    for name in meta["panels"]:
        panels[name] = {
            field: np.load(os.path.join(root, name, field + ".npy"), mmap_mode="r") for field in meta["fields"]
        }
    _state.update(
        meta=meta,
        panels=panels,
        index=pd.DatetimeIndex(pd.to_datetime(meta["dates"]), name="date"),
        columns=pd.Index(meta["symbols"], name="symbol"),
        work=os.path.realpath(os.path.join(root, "work")),
        violations=[],
    )
    reads = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    reads |= {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    reads.add(os.path.realpath(root))
    _state["reads"] = sorted(reads)
    # Modules user code commonly needs, imported before the audit hook: polars' import
    # probes for libraries with ctypes and subprocesses, which the hook would refuse.
    import math, statistics, itertools, functools, collections  # noqa: F401
    try:
        import polars  # noqa: F401
    except ImportError:
        pass
    sys.addaudithook(_hook)
    return _state["reads"]


_NETWORK = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
            "socket.sendto", "urllib.Request"}
_PROCESS = {"os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
            "os.kill", "os.killpg", "pty.spawn"}
_CTYPES = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "ctypes.addressof",
           "ctypes.string_at", "ctypes.wstring_at", "cffi"}
_FORBIDDEN_IMPORTS = {"ctypes", "_ctypes", "cffi", "socket", "_socket", "subprocess", "_posixsubprocess",
                      "multiprocessing", "pty", "urllib.request", "http.client"}
_FILE_CHANGES = {"os.remove", "os.rmdir", "os.rename", "shutil.rmtree", "os.truncate", "os.chmod", "os.chown",
                 "os.symlink", "os.link", "os.mkdir", "os.utime", "shutil.move", "shutil.copyfile"}


def _inside(path, roots):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return any(p == r or p.startswith(r + os.sep) for r in roots)


def _deny(kind, detail):
    _state["violations"].append(f"{kind} ({detail})")
    raise Violation(kind, detail)


def _hook(event, args):
    if event in _NETWORK:
        _deny("network", event)
    elif event in _PROCESS:
        _deny("process", event)
    elif event in _CTYPES:
        _deny("ctypes", event)
    elif event == "resource.setrlimit" or event == "resource.prlimit":
        _deny("limits", event)
    elif event == "import" and args and args[0] in _FORBIDDEN_IMPORTS:
        _deny("import", args[0])
    elif event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path, mode = args[0], args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & (os.O_WRONLY | os.O_RDWR))
        if os.fsdecode(path) == os.devnull:
            return
        if writes and not _inside(path, [_state["work"]]):
            _deny("file write", os.fsdecode(path))
        if not writes and not _inside(path, _state["reads"] + [_state["work"]]):
            _deny("file read", os.fsdecode(path))
    elif event in _FILE_CHANGES and args and isinstance(args[0], (str, bytes, os.PathLike)):
        if not _inside(args[0], [_state["work"]]):
            _deny("file write", f"{event} {os.fsdecode(args[0])}")


class _Data(dict):
    """`data[field]`; an unknown field names the ones there are."""

    def __missing__(self, key):
        raise KeyError(f"unknown field {key!r}; fields: {', '.join(sorted(self))}")


def _inputs(cls, panel):
    fields = list(getattr(cls, "inputs", None) or _state["meta"]["fields"])
    unknown = [f for f in fields if f not in panel]
    if unknown:
        raise KeyError(f"inputs names unknown field(s) {unknown}; fields: {', '.join(sorted(panel))}")
    kind = getattr(cls, "input_type", "pandas")
    data = _Data()
    for f in fields:
        a = panel[f]
        if kind == "numpy":
            data[f] = a
        elif kind == "pandas":
            data[f] = pd.DataFrame(a, index=_state["index"], columns=_state["columns"], copy=False)
        elif kind == "polars":
            import polars as pl
            df = pl.from_numpy(np.asarray(a), schema=list(_state["columns"]), orient="row")
            data[f] = df.insert_column(0, pl.Series("date", _state["index"].to_numpy()))
        else:
            raise ValueError(f"input_type must be 'pandas', 'numpy' or 'polars', not {kind!r}")
    return data


def _as_array(out, shape):
    """The factor's output as a float64 (dates x symbols) array, or a reason it is not one."""
    if isinstance(out, pd.DataFrame):
        if out.shape != shape:
            return None, f"wrong shape: returned {out.shape[0]} x {out.shape[1]}, expected {shape[0]} x {shape[1]}"
        idx, cols = _state["index"], _state["columns"]
        if not out.columns.equals(cols) and set(out.columns) == set(cols):
            out = out.reindex(columns=cols)
        if not out.index.equals(idx) and set(out.index) == set(idx):
            out = out.reindex(index=idx)
        if not out.columns.equals(cols) or not out.index.equals(idx):
            return None, "wrong shape: the returned frame's dates or symbols differ from the input's"
        try:
            return out.to_numpy(dtype="float64", na_value=np.nan), None
        except (TypeError, ValueError) as e:
            return None, f"invalid output: values are not numbers ({e})"
    if type(out).__module__.startswith("polars"):
        cols = [c for c in out.columns if c != "date"]
        out = out.select(cols).to_numpy()
    if isinstance(out, pd.Series):
        return None, f"wrong shape: returned a Series of {len(out)}, expected a {shape[0]} x {shape[1]} frame"
    if isinstance(out, np.ndarray):
        if out.shape != shape:
            return None, f"wrong shape: returned {out.shape}, expected {shape}"
        if out.dtype.kind not in "biuf":
            return None, f"invalid output: dtype {out.dtype}"
        return out.astype("float64", copy=False), None
    return None, f"invalid output: calc returned {type(out).__name__}, expected a DataFrame or an array"


def _trimmed_traceback(e):
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == FILE]
    lines = [f"{FILE} line {f.lineno}, in {f.name}: {(f.line or '').strip()}" for f in frames]
    lines.append(f"{type(e).__name__}: {e}")
    return "\n".join(lines)


def _factor_class(ns, wanted):
    from alphaloop_factor import Factor

    classes = {k: v for k, v in ns.items() if isinstance(v, type) and issubclass(v, Factor) and v is not Factor}
    if wanted:
        if wanted not in classes:
            raise LookupError(f"{FILE} defines no Factor class {wanted!r}; it defines: {', '.join(classes) or 'none'}")
        return classes[wanted]
    if len(classes) != 1:
        names = ", ".join(classes) or "none"
        raise LookupError(f"{FILE} must define exactly one Factor subclass (found: {names}); pick one with --class")
    return next(iter(classes.values()))


def run(code, class_name, panel_name, min_finite):
    """Runs one factor; returns (header dict, bytes of the Fortran-ordered float64 array or None)."""
    _state["violations"].clear()
    panel = _state["panels"][panel_name]
    shape = (len(_state["index"]), len(_state["columns"]))
    linecache.cache[FILE] = (len(code), None, code.splitlines(True), FILE)
    out = None
    t0 = time.perf_counter()
    try:
        ns = {"__name__": "factor", "__file__": FILE}
        exec(compile(code, FILE, "exec"), ns)
        cls = _factor_class(ns, class_name)
        out = cls().calc(_inputs(cls, panel))
    except MemoryError:
        return _verdict("memory", "the factor ran out of memory"), None
    except Violation as e:
        pass  # reported below, from the record
    except SystemExit:
        return _verdict("error", "the factor called exit()"), None
    except BaseException as e:  # noqa: BLE001 - any error in user code goes back to the writer
        if not _state["violations"]:
            return _verdict("error", _trimmed_traceback(e)), None
    if _state["violations"]:
        return _verdict("forbidden: " + _state["violations"][0].split(" (")[0], "; ".join(_state["violations"])), None
    try:
        arr, reason = _as_array(out, shape)
    except MemoryError:
        return _verdict("memory", "the factor's output did not fit in memory"), None
    if reason:
        return _verdict(reason.split(":")[0], reason), None
    n_inf = int(np.isinf(arr).sum())
    if n_inf:
        return _verdict("invalid output", f"invalid output: {n_inf} infinite values"), None
    finite = float(np.isfinite(arr).mean()) if arr.size else 0.0
    if finite < min_finite:
        return _verdict("invalid output", f"invalid output: only {finite:.1%} of values are finite (minimum {min_finite:.0%})"), None
    seconds = time.perf_counter() - t0
    return {"ok": True, "rows": shape[0], "cols": shape[1], "calc_seconds": seconds}, np.asfortranarray(arr).tobytes(order="F")


def _verdict(verdict, message):
    return {"ok": False, "verdict": verdict, "message": message}


def run_json(code, class_name, panel_name, min_finite):
    """`run` with the header as a JSON line, as the Rust worker sends it."""
    header, data = run(code, class_name, panel_name, min_finite)
    return json.dumps(header), data
