//! Panels as `.npy` files the worker memory-maps: Fortran order (column-major) with shape
//! (dates, assets), the asset-major layout of a pandas block, so the worker does not copy.

use crate::data::Panel;
use std::io::Write;
use std::path::Path;

pub fn write(path: &Path, p: &Panel) -> std::io::Result<()> {
    let dict = format!("{{'descr': '<f8', 'fortran_order': True, 'shape': ({}, {}), }}", p.n_dates(), p.n_assets());
    // magic (6) + version (2) + header length (2) + header, padded with spaces to 64 bytes, ending in \n
    let unpadded = 10 + dict.len() + 1;
    let header = format!("{dict}{}\n", " ".repeat((64 - unpadded % 64) % 64));
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    for v in p.to_asset_major() {
        f.write_all(&v.to_le_bytes())?;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()
}
