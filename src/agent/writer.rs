//! What the expression writer is shown of the KB, and how its reply is read back.
//!
//! The retrieved records are shown under short labels (`A1`, `A2`, … for accepted alphas,
//! `F1`, … for failed attempts) rather than their ids: a label costs the model two tokens,
//! means the same in every run (this run's ids would differ between runs and make recorded
//! replies unusable), and lets the grammar admit exactly what was shown. The writer replies
//! `USES: A1, F2` (the records it built on, or `none`) and an expression in which
//! `alpha:A1` is accepted alpha A1's signal; [`Labels::resolve`] turns both back into ids.

use crate::kb::retrieve::Context;

/// The labels of one prompt, each with the id it stands for.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    /// Accepted alphas: usable as `alpha:LABEL` and citable.
    pub alphas: Vec<(String, String)>,
    /// Failed attempts: citable only.
    pub failures: Vec<(String, String)>,
}

impl Labels {
    pub fn of(ctx: &Context) -> Labels {
        let label = |p: &str, hits: &[crate::kb::Hit]| hits.iter().enumerate().map(|(i, h)| (format!("{p}{}", i + 1), h.record.id.clone())).collect();
        Labels { alphas: label("A", &ctx.successes), failures: label("F", &ctx.failures) }
    }

    /// The labels `alpha:` may name.
    pub fn alpha_labels(&self) -> Vec<String> {
        self.alphas.iter().map(|(l, _)| l.clone()).collect()
    }

    /// The labels `USES:` may name.
    pub fn citable(&self) -> Vec<String> {
        self.alphas.iter().chain(&self.failures).map(|(l, _)| l.clone()).collect()
    }

    fn id(&self, label: &str) -> Option<&str> {
        self.alphas.iter().chain(&self.failures).find(|(l, _)| l.eq_ignore_ascii_case(label)).map(|(_, id)| id.as_str())
    }

    /// The ids the reply's `USES:` line cites (labels it was not shown are dropped: a
    /// remote model, without the grammar, may invent some), each once, in order.
    pub fn cited(&self, reply: &str) -> Vec<String> {
        let Some(line) = reply.lines().map(str::trim).find(|l| l.to_ascii_uppercase().starts_with("USES:")) else { return Vec::new() };
        let mut out: Vec<String> = Vec::new();
        for word in line[5..].split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()) {
            if let Some(id) = self.id(word) {
                if !out.iter().any(|o| o == id) {
                    out.push(id.to_string());
                }
            }
        }
        out
    }

    /// `code` with each `alpha:LABEL` of a shown accepted alpha replaced by `(alpha:ID)`
    /// (bracketed: an id may contain `-`, so `alpha:ID-close` would read as one id).
    /// Other `alpha:` references are left as written, for the compiler to refuse.
    pub fn resolve(&self, code: &str) -> String {
        let mut out = String::with_capacity(code.len());
        let mut rest = code;
        while let Some(i) = rest.find("alpha:") {
            out.push_str(&rest[..i]);
            let after = &rest[i + "alpha:".len()..];
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            let known = self.alphas.iter().find(|(l, _)| *l == after[..end]);
            match known {
                Some((_, id)) => {
                    out.push_str(&format!("(alpha:{id})"));
                    rest = &after[end..];
                }
                None => {
                    out.push_str("alpha:");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Labels {
        Labels {
            alphas: vec![("A1".into(), "alpha101_003".into()), ("A2".into(), "run7-0004".into())],
            failures: vec![("F1".into(), "run7-0002".into())],
        }
    }

    #[test]
    fn labels_become_ids_in_code_and_citations() {
        let l = labels();
        assert_eq!(l.resolve("rank(alpha:A2-close) + alpha:A1"), "rank((alpha:run7-0004)-close) + (alpha:alpha101_003)");
        assert_eq!(l.resolve("alpha:A12 + alpha:other"), "alpha:A12 + alpha:other", "unknown labels stay for the compiler to refuse");
        assert_eq!(l.cited("USES: A2, F1, A2, F9\nrank(close)"), ["run7-0004", "run7-0002"]);
        assert!(l.cited("USES: none\nrank(close)").is_empty());
        assert!(l.cited("rank(close)").is_empty());
        assert_eq!(l.citable(), ["A1", "A2", "F1"]);
        assert_eq!(l.alpha_labels(), ["A1", "A2"]);
    }

    #[test]
    fn a_resolved_reference_parses_to_the_id() {
        let code = labels().resolve("rank(alpha:A2-close)");
        let e = crate::expr::parse(&code).expect("parses");
        assert_eq!(e.alpha_refs(), ["run7-0004"]);
    }
}
