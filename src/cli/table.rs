//! Tables: plain aligned text for the terminal, and CSV or Parquet files (the format by
//! the file name's extension).

/// Formats rows as a left-aligned first column and right-aligned others.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let ncol = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(ncol) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if i == 0 || i == 1 && header.first() == Some(&"#") {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
            if i + 1 < cells.len() {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    out.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * (ncol.saturating_sub(1))));
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// `s` cut to `n` characters at most, an ellipsis marking the cut.
pub fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n.saturating_sub(1)).collect::<String>())
    }
}

/// A number with 4 decimals, or `-` for NaN.
pub fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        "-".into()
    }
}

/// Tables written to a file, in the format its extension names (`.csv`, `.parquet`).
pub enum FileFormat {
    Csv,
    Parquet,
}

impl FileFormat {
    /// The format `out` names. Checked before any work, so that a wrong name fails at once
    /// and never truncates a file of that name (say, a spreadsheet) before failing.
    pub fn of(out: &std::path::Path) -> anyhow::Result<FileFormat> {
        match out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase().as_str() {
            "csv" => Ok(FileFormat::Csv),
            "parquet" | "pq" => Ok(FileFormat::Parquet),
            other => anyhow::bail!("{}: cannot write '.{other}' files; use .parquet or .csv", out.display()),
        }
    }
}

/// Writes `df` to `out` in the format its extension names; the file is created only once
/// the name is known good.
pub fn write_table(df: &mut polars::prelude::DataFrame, out: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    use polars::prelude::{CsvWriter, ParquetWriter, SerWriter};
    let format = FileFormat::of(out)?;
    let f = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    match format {
        FileFormat::Csv => CsvWriter::new(f).finish(df)?,
        FileFormat::Parquet => {
            ParquetWriter::new(f).finish(df)?;
        }
    }
    Ok(())
}
