//! The few calls of XGBoost's C API the combined model makes (over `xgboost_lib-sys`).
//!
//! Why not the `xgb` crate: it builds matrices only through `XGDMatrixCreateFromMat`,
//! which keeps every value as an 8-byte (value, column) entry beside our own f32 rows, and
//! the `hist` trainer then bins that copy once more. Here the matrices are XGBoost's
//! quantile matrices (its Python package's `QuantileDMatrix`): read once from our rows,
//! they keep a bin index per cell, one byte when no cell is missing (`train` fills missing
//! features, see `feature_value`). Valid and test are cut at train's bin edges, so a
//! tree's split (always at an edge) sends a binned value where it sends the raw one, and
//! predictions on them equal predictions on the raw rows (`tests/model.rs` checks it).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use xgboost_lib_sys as sys;

/// An error reported by XGBoost (its own message).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct XgbError(String);

type Result<T> = std::result::Result<T, XgbError>;

fn check(ret: c_int) -> Result<()> {
    if ret == 0 { Ok(()) } else { Err(last_error()) }
}

fn last_error() -> XgbError {
    // SAFETY: XGBoost returns a NUL-terminated message owned by the calling thread.
    let msg = unsafe { CStr::from_ptr(sys::XGBGetLastError()) }.to_string_lossy();
    // Its message, without the C++ stack trace it appends (frames of libxgboost, not ours).
    let msg = msg.split("\nStack trace:").next().unwrap_or_default();
    XgbError(msg.trim_end().to_string())
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| XgbError(format!("a NUL byte in {s:?}")))
}

/// `rows` × `cols` row-major f32 cells as a NumPy array interface (XGBoost reads the
/// pointer; the slice must outlive the call that receives it).
fn dense_interface(x: &[f32], rows: usize) -> Result<CString> {
    if rows == 0 || !x.len().is_multiple_of(rows) {
        return Err(XgbError(format!("{} values cannot be cut into {rows} rows", x.len())));
    }
    let cols = x.len() / rows;
    let json = format!(r#"{{"data":[{},true],"shape":[{rows},{cols}],"strides":null,"typestr":"<f4","version":3}}"#, x.as_ptr() as usize);
    c_string(&json)
}

/// One of XGBoost's prediction calls (given the [`PREDICT`] settings and its shape and
/// result out-parameters), its result copied out before the booster's next call: as many
/// values as the returned shape's extents multiply to.
fn predicted(call: impl FnOnce(*const c_char, *mut *const u64, *mut u64, *mut *const f32) -> c_int) -> Result<Vec<f32>> {
    let config = c_string(PREDICT)?;
    let (mut shape, mut dim, mut out) = (std::ptr::null(), 0u64, std::ptr::null());
    check(call(config.as_ptr(), &mut shape, &mut dim, &mut out))?;
    if shape.is_null() || out.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: XGBoost hands out `dim` extents at `shape` and their product of floats at `out`.
    let len: u64 = unsafe { std::slice::from_raw_parts(shape, dim as usize) }.iter().product();
    // SAFETY: `out` holds the product of those extents of floats, until the next call.
    Ok(unsafe { std::slice::from_raw_parts(out, len as usize) }.to_vec())
}

/// A quantile matrix: rows binned at fixed edges, with their labels.
// Not `Send`: XGBoost keeps per-thread entries keyed by the matrix and clears only the
// dropping thread's.
pub struct DMatrix {
    handle: sys::DMatrixHandle,
}

impl Drop for DMatrix {
    fn drop(&mut self) {
        // SAFETY: the handle came from XGBoost and is freed once.
        unsafe { sys::XGDMatrixFree(self.handle) };
    }
}

/// The one-batch iterator XGBoost reads a quantile matrix's rows through.
struct OneBatch {
    proxy: sys::DMatrixHandle,
    data: CString,
    given: bool,
    failed: bool,
}

unsafe extern "C" fn batch_reset(it: sys::DataIterHandle) {
    // SAFETY: `it` is the `OneBatch` passed to the constructor, alive for its call.
    let it = unsafe { &mut *(it as *mut OneBatch) };
    it.given = false;
}

/// 1 while there is a batch (it is set on the proxy), 0 at the end.
unsafe extern "C" fn batch_next(it: sys::DataIterHandle) -> c_int {
    // SAFETY: as in `batch_reset`.
    let it = unsafe { &mut *(it as *mut OneBatch) };
    if it.given {
        return 0;
    }
    it.given = true;
    // SAFETY: the proxy is alive and the interface points at rows that outlive the call.
    if unsafe { sys::XGProxyDMatrixSetDataDense(it.proxy, it.data.as_ptr()) } != 0 {
        it.failed = true;
        return 0;
    }
    1
}

impl DMatrix {
    /// A quantile matrix of `rows` row-major rows `x` (NaN is missing) labelled `labels`.
    /// Its bin edges are `reference`'s when given (valid and test take train's), else
    /// sketched from `x` with XGBoost's default 256 bins (the booster's `max_bin`).
    pub fn quantile(x: &[f32], rows: usize, labels: &[f32], reference: Option<&DMatrix>, threads: usize) -> Result<DMatrix> {
        if labels.len() != rows {
            return Err(XgbError(format!("{} labels for {rows} rows", labels.len())));
        }
        let data = dense_interface(x, rows)?;
        let mut proxy = std::ptr::null_mut();
        // SAFETY: plain out-parameter call.
        check(unsafe { sys::XGProxyDMatrixCreate(&mut proxy) })?;
        let mut it = OneBatch { proxy, data, given: false, failed: false };
        let config = c_string(&format!(r#"{{"missing": NaN, "nthread": {}, "max_bin": 256}}"#, threads.max(1)))?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: the iterator, proxy and rows outlive the call, which reads every batch
        // before it returns; the reference, if any, is a live matrix.
        let ret = unsafe {
            sys::XGQuantileDMatrixCreateFromCallback(
                &mut it as *mut OneBatch as sys::DataIterHandle,
                proxy,
                reference.map_or(std::ptr::null_mut(), |r| r.handle),
                Some(batch_reset),
                Some(batch_next),
                config.as_ptr(),
                &mut handle,
            )
        };
        // The proxy's error, if setting the rows failed, before anything else is called:
        // it is the cause of whatever XGBoost then reports about an empty matrix.
        let failed = it.failed.then(last_error);
        // SAFETY: the proxy is only a view; it goes once the matrix is built.
        unsafe { sys::XGDMatrixFree(proxy) };
        // (A built matrix is freed on drop if the rows' error follows.)
        let built = check(ret).map(|_| DMatrix { handle });
        if let Some(e) = failed {
            return Err(e);
        }
        let m = built?;
        let key = c_string("label")?;
        // SAFETY: `labels` holds `rows` floats; XGBoost copies them.
        check(unsafe { sys::XGDMatrixSetFloatInfo(m.handle, key.as_ptr(), labels.as_ptr(), rows as u64) })?;
        Ok(m)
    }
}

/// A gradient-boosted model.
pub struct Booster {
    handle: sys::BoosterHandle,
}

impl Drop for Booster {
    fn drop(&mut self) {
        // SAFETY: the handle came from XGBoost and is freed once.
        unsafe { sys::XGBoosterFree(self.handle) };
    }
}

/// Prediction settings: the plain value, every tree, not training.
const PREDICT: &str = r#"{"type": 0, "training": false, "iteration_begin": 0, "iteration_end": 0, "strict_shape": false, "missing": NaN}"#;

impl Booster {
    /// A new booster that keeps prediction caches for `cache` (the matrices it is trained
    /// and early-stopped on).
    pub fn new(cache: &[&DMatrix]) -> Result<Booster> {
        let handles: Vec<sys::DMatrixHandle> = cache.iter().map(|d| d.handle).collect();
        let mut handle = std::ptr::null_mut();
        // SAFETY: `handles` are live matrices; XGBoost keeps references the caller keeps alive.
        check(unsafe { sys::XGBoosterCreate(handles.as_ptr(), handles.len() as u64, &mut handle) })?;
        Ok(Booster { handle })
    }

    /// A booster saved by [`Booster::save_json`].
    pub fn load_json(text: &str) -> Result<Booster> {
        let b = Booster::new(&[])?;
        // SAFETY: the buffer is read during the call.
        check(unsafe { sys::XGBoosterLoadModelFromBuffer(b.handle, text.as_ptr() as *const c_void, text.len() as u64) })?;
        Ok(b)
    }

    pub fn set_param(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (c_string(key)?, c_string(value)?);
        // SAFETY: both strings are NUL-terminated and read during the call.
        check(unsafe { sys::XGBoosterSetParam(self.handle, k.as_ptr(), v.as_ptr()) })
    }

    /// One boosting round on `train`.
    pub fn update(&mut self, train: &DMatrix, round: i32) -> Result<()> {
        // SAFETY: both handles are live.
        check(unsafe { sys::XGBoosterUpdateOneIter(self.handle, round, train.handle) })
    }

    /// Predictions for a matrix's rows (incremental for a cached matrix).
    pub fn predict(&self, d: &DMatrix) -> Result<Vec<f32>> {
        // SAFETY: both handles are live; the rest are the call's out-parameters.
        predicted(|config, shape, dim, out| unsafe { sys::XGBoosterPredictFromDMatrix(self.handle, d.handle, config, shape, dim, out) })
    }

    /// Predictions for `rows` raw row-major rows `x` (NaN is missing), without a matrix.
    pub fn predict_dense(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let data = dense_interface(x, rows)?;
        // SAFETY: `x` outlives the call; the rest are its out-parameters.
        predicted(|config, shape, dim, out| unsafe { sys::XGBoosterPredictFromDense(self.handle, data.as_ptr(), config, std::ptr::null_mut(), shape, dim, out) })
    }

    /// The trees of rounds `begin..end` as a booster of their own.
    pub fn slice(&self, begin: i32, end: i32) -> Result<Booster> {
        if end <= begin {
            return Err(XgbError(format!("boosting rounds {begin}..{end} are empty")));
        }
        let mut handle = std::ptr::null_mut();
        // SAFETY: out-parameter call on a live booster.
        match unsafe { sys::XGBoosterSlice(self.handle, begin, end, 1, &mut handle) } {
            -2 => Err(XgbError(format!("boosting rounds {begin}..{end} are out of bounds"))),
            ret => check(ret).map(|_| Booster { handle }),
        }
    }

    /// The model as XGBoost's JSON document.
    pub fn save_json(&self) -> Result<String> {
        let config = c_string(r#"{"format": "json"}"#)?;
        let (mut len, mut ptr) = (0u64, std::ptr::null());
        // SAFETY: out-parameters; the buffer is copied before the next call.
        check(unsafe { sys::XGBoosterSaveModelToBuffer(self.handle, config.as_ptr(), &mut len, &mut ptr) })?;
        // SAFETY: XGBoost hands out `len` bytes at `ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len as usize) };
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Every tree as text with its statistics (`[f12<0.5] ... gain=3.1,cover=...`).
    pub fn dump(&self) -> Result<Vec<String>> {
        let (fmap, format) = (c_string("")?, c_string("text")?);
        let (mut len, mut arr): (u64, *mut *const c_char) = (0, std::ptr::null_mut());
        // SAFETY: out-parameters; the strings are copied before the next call.
        check(unsafe { sys::XGBoosterDumpModelEx(self.handle, fmap.as_ptr(), 1, format.as_ptr(), &mut len, &mut arr) })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: `len` NUL-terminated strings at `arr`.
        let trees = unsafe { std::slice::from_raw_parts(arr, len as usize) };
        // SAFETY: each is a NUL-terminated string owned by the booster until its next call.
        Ok(trees.iter().map(|&s| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()).collect())
    }
}
