//! Alpha files: a TOML list of `[[alpha]]` tables with `id` and `formula` (and optional
//! `source`, `name`, `idea`, `family`). The seed library `alpha_kb/seeds/alpha101.toml` and
//! the input of `alphaloop eval --file` share this format. A `.txt` file is a plain list,
//! one formula per line (blank lines and `#` comments skipped), each named after the file
//! and its line (`mine_007` for line 7 of `mine.txt`): the form alphas are usually kept in.

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
    /// The idea family (`kb export` writes it, `kb import` keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
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

/// The shipped seeds as an `alpha:ID` resolver; empty outside a checkout that has them.
pub fn default_set() -> Result<AlphaSet, SeedError> {
    let p = default_file();
    Ok(if p.exists() { AlphaSet::from_defs(&load(&p)?) } else { AlphaSet::default() })
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
    let file: AlphaFile = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("txt")) {
        AlphaFile { alpha: from_lines(path, &text) }
    } else {
        toml::from_str(&text).map_err(|e| SeedError::Parse { path: path.to_path_buf(), msg: e.to_string() })?
    };
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

/// The alphas of a plain list: one formula per line, ids from the file's stem and the
/// line number (zero-padded to the file's line count, so they sort in file order).
fn from_lines(path: &Path, text: &str) -> Vec<AlphaDef> {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "alpha".into());
    let width = text.lines().count().to_string().len().max(3);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| AlphaDef {
            id: format!("{stem}_{:0width$}", i + 1),
            formula: l.trim().to_string(),
            name: None,
            idea: None,
            source: Some(format!("{}, line {}", path.display(), i + 1)),
            family: None,
        })
        .collect()
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
