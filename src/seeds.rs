//! Alpha files: a TOML list of `[[alpha]]` tables with `id` and `formula` (and optional
//! `source`, `name`, `idea`). The seed library `alpha_kb/seeds/alpha101.toml` and the
//! input of `alphaloop eval --file` share this format.

use crate::expr::AlphaResolver;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlphaDef {
    pub id: String,
    pub formula: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idea: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct AlphaFile {
    #[serde(default)]
    alpha: Vec<AlphaDef>,
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("alpha file not found: {0}")]
    NotFound(PathBuf),
    #[error("{path}: {msg}")]
    Parse { path: PathBuf, msg: String },
    #[error("{path}: alpha #{index} has an empty {field}")]
    Empty { path: PathBuf, index: usize, field: &'static str },
    #[error("{path}: duplicate alpha id '{id}'")]
    Duplicate { path: PathBuf, id: String },
}

/// The shipped seed alphas of the checkout ([`crate::checkout_dir`]): the published 101.
pub fn default_file() -> PathBuf {
    crate::checkout_dir().unwrap_or_default().join("alpha_kb/seeds/alpha101.toml")
}

/// Reads an alpha file.
pub fn load(path: &Path) -> Result<Vec<AlphaDef>, SeedError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            SeedError::NotFound(path.to_path_buf())
        } else {
            SeedError::Parse { path: path.to_path_buf(), msg: e.to_string() }
        }
    })?;
    let file: AlphaFile = toml::from_str(&text).map_err(|e| SeedError::Parse { path: path.to_path_buf(), msg: e.to_string() })?;
    let mut seen = std::collections::HashSet::new();
    for (i, a) in file.alpha.iter().enumerate() {
        if a.id.trim().is_empty() {
            return Err(SeedError::Empty { path: path.to_path_buf(), index: i + 1, field: "id" });
        }
        if a.formula.trim().is_empty() {
            return Err(SeedError::Empty { path: path.to_path_buf(), index: i + 1, field: "formula" });
        }
        if !seen.insert(a.id.clone()) {
            return Err(SeedError::Duplicate { path: path.to_path_buf(), id: a.id.clone() });
        }
    }
    Ok(file.alpha)
}

/// Writes an alpha file.
pub fn to_toml(alphas: &[AlphaDef]) -> Result<String, toml::ser::Error> {
    toml::to_string(&AlphaFile { alpha: alphas.to_vec() })
}

/// Resolves `alpha:ID` against a set of alpha definitions.
#[derive(Default, Clone)]
pub struct AlphaSet(pub HashMap<String, String>);

impl AlphaSet {
    pub fn from_defs(defs: &[AlphaDef]) -> AlphaSet {
        AlphaSet(defs.iter().map(|a| (a.id.clone(), a.formula.clone())).collect())
    }
    pub fn extend(&mut self, defs: &[AlphaDef]) {
        self.0.extend(defs.iter().map(|a| (a.id.clone(), a.formula.clone())));
    }
}

impl AlphaResolver for AlphaSet {
    fn formula(&self, id: &str) -> Option<String> {
        self.0.get(id).cloned()
    }
    fn ids(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}
