//! Expression errors that point at the offending position.

/// An error in an expression, with the 1-based character position it refers to.
///
/// Displays as `unknown field 'clsoe' at 12; did you mean 'close'?`; [`ExprError::render`]
/// adds the expression with a caret under the position.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{msg} at {pos}{}", context.as_ref().map(|c| format!("in {c}: ")).unwrap_or_default(), hint.as_ref().map(|h| format!("; {h}")).unwrap_or_default())]
pub struct ExprError {
    pub msg: String,
    /// 1-based character position in `text`.
    pub pos: usize,
    /// Length of the offending token, in characters (at least 1).
    pub len: usize,
    pub hint: Option<String>,
    /// The expression the position refers to.
    pub text: String,
    /// Set when the error is inside a referenced alpha (`alpha:ID`).
    pub context: Option<String>,
}

impl ExprError {
    /// Builds an error from a byte span of `text`.
    pub fn at(text: &str, span: Span, msg: impl Into<String>) -> ExprError {
        let start = text.get(..span.start).map(|s| s.chars().count()).unwrap_or(span.start);
        let len = text.get(span.start..span.end).map(|s| s.chars().count()).unwrap_or(1).max(1);
        ExprError { msg: msg.into(), pos: start + 1, len, hint: None, text: text.to_string(), context: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> ExprError {
        self.hint = Some(hint.into());
        self
    }

    /// The message, the expression, and a caret line under the position.
    pub fn render(&self) -> String {
        let pad = " ".repeat(self.pos.saturating_sub(1));
        format!("{self}\n  {}\n  {pad}{}", self.text, "^".repeat(self.len))
    }
}

/// A byte range in the expression text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

/// The closest candidate by edit distance, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let w = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (levenshtein(&w, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(w.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!("did you mean '{c}'?"))
}

/// Edit distance counting an adjacent transposition as one edit (optimal string
/// alignment), so `clsoe` is one step from `close`.
fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, v) in d.iter_mut().enumerate().take(w) {
        *v = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1).min(d[i * w + j - 1] + 1).min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("clsoe", ["open", "close", "volume"]).as_deref(), Some("did you mean 'close'?"));
        assert_eq!(did_you_mean("zzzzzz", ["open", "close"]), None);
    }

    #[test]
    fn renders_caret() {
        let e = ExprError::at("rank(clsoe)", Span::new(5, 10), "unknown field 'clsoe'").with_hint("did you mean 'close'?");
        assert_eq!(e.to_string(), "unknown field 'clsoe' at 6; did you mean 'close'?");
        assert!(e.render().ends_with("\n       ^^^^^"));
    }
}
