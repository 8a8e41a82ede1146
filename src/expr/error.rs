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

    /// The text the error points at, cut to `max` characters with `…`.
    pub fn fragment(&self, max: usize) -> String {
        let part: Vec<char> = self.text.chars().skip(self.pos.saturating_sub(1)).take(self.len).collect();
        if part.len() > max {
            part[..max.saturating_sub(1)].iter().chain(['…'].iter()).collect()
        } else {
            part.into_iter().collect()
        }
    }

    /// The message, the expression, and a caret line under the position. The expression
    /// is shown on one line (a formula pasted from a file may span several, and a newline
    /// or tab would move the caret off its place) and, when longer than [`SHOWN`]
    /// characters, cut to the stretch around the position, marked with `…` (an LLM's
    /// runaway reply or a generated formula can be thousands of characters).
    pub fn render(&self) -> String {
        let chars: Vec<char> = self.text.chars().map(|c| if c.is_whitespace() { ' ' } else { c }).collect();
        let at = self.pos.saturating_sub(1).min(chars.len());
        let (mut from, mut to) = (0, chars.len());
        if chars.len() > SHOWN {
            from = at.saturating_sub(SHOWN / 3);
            to = (from + SHOWN).min(chars.len());
            from = to.saturating_sub(SHOWN);
        }
        let (head, tail) = (if from > 0 { "…" } else { "" }, if to < chars.len() { "…" } else { "" });
        let shown: String = chars[from..to].iter().collect();
        let pad = " ".repeat(at - from + head.chars().count());
        let carets = "^".repeat(self.len.min(to.saturating_sub(at)).max(1));
        format!("{self}\n  {head}{shown}{tail}\n  {pad}{carets}")
    }
}

/// Characters of the expression [`ExprError::render`] shows at most.
const SHOWN: usize = 100;

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

    #[test]
    fn renders_a_long_or_multiline_expression_around_the_position() {
        // A formula over two lines: the caret stays under the token.
        let e = ExprError::at("rank(\n\tclsoe)", Span::new(7, 12), "unknown field 'clsoe'");
        assert!(e.render().ends_with("\n  rank(  clsoe)\n         ^^^^^"), "{}", e.render());
        // 10,000 characters: a window of SHOWN around the position, cut ends marked.
        let text = format!("{}clsoe{}", "abs(".repeat(1000), ")".repeat(1000) + &" + close".repeat(600));
        let e = ExprError::at(&text, Span::new(4000, 4005), "unknown field 'clsoe'");
        let r = e.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("  …") && lines[1].contains("abs(abs(") && lines[1].ends_with(")…"), "{}", lines[1]);
        assert_eq!(lines[1].chars().count(), 2 + SHOWN + 2);
        let (shown, caret): (Vec<char>, usize) = (lines[1].chars().collect(), lines[2].find('^').unwrap());
        assert_eq!(shown[caret..caret + 5].iter().collect::<String>(), "clsoe");
        assert_eq!(lines[2].trim_start(), "^^^^^");
        // An error at the end of a long expression: the tail shown, no closing mark.
        let e = ExprError::at(&text, Span::new(text.len(), text.len()), "expected a value");
        let r = e.render();
        let lines: Vec<&str> = r.lines().collect();
        assert!(lines[1].ends_with(" + close") && lines[1].starts_with("  …"), "{}", lines[1]);
        assert_eq!(lines[2].chars().count(), lines[1].chars().count() + 1);
    }
}
