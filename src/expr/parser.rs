//! Lexer and recursive-descent parser for the WorldQuant-style alpha notation.
//!
//! Precedence, loosest first: `?:` (right), `||`, `&&`, comparisons, `+ -`, `* /`, unary
//! `-`/`+`, `^` (right; binds tighter than unary minus, so `-x^2` is `-(x^2)`).
//! Names are case-insensitive; `IndClass.level` is one identifier; `alpha:ID` refers to
//! another alpha by id.

use super::ast::{BinOp, Expr, ExprKind};
use super::error::{ExprError, Span};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    AlphaRef(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
    Eof,
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

const OPS: &[&str] = &["<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "^", "<", ">", "?", ":"];

impl<'a> Lexer<'a> {
    fn next(&mut self) -> Result<(Tok, Span), ExprError> {
        while self.pos < self.bytes.len() && self.bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&c) = self.bytes.get(self.pos) else {
            return Ok((Tok::Eof, Span::new(start, start + 1)));
        };
        let span = |end: usize| Span::new(start, end);
        if c.is_ascii_digit() || (c == b'.' && self.bytes.get(self.pos + 1).is_some_and(|b| b.is_ascii_digit())) {
            while self.pos < self.bytes.len() && (self.bytes[self.pos].is_ascii_digit() || self.bytes[self.pos] == b'.') {
                self.pos += 1;
            }
            if self.pos < self.bytes.len() && matches!(self.bytes[self.pos], b'e' | b'E') {
                let mut p = self.pos + 1;
                if p < self.bytes.len() && matches!(self.bytes[p], b'+' | b'-') {
                    p += 1;
                }
                if p < self.bytes.len() && self.bytes[p].is_ascii_digit() {
                    while p < self.bytes.len() && self.bytes[p].is_ascii_digit() {
                        p += 1;
                    }
                    self.pos = p;
                }
            }
            let s = &self.text[start..self.pos];
            return match s.parse::<f64>() {
                // A literal past f64's range would silently become infinity (`1e400`).
                Ok(v) if v.is_infinite() => Err(ExprError::at(self.text, span(self.pos), format!("number '{s}' is beyond the range of a double (about 1.8e308)"))),
                Ok(v) => Ok((Tok::Num(v), span(self.pos))),
                Err(_) => Err(ExprError::at(self.text, span(self.pos), format!("malformed number '{s}'"))),
            };
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let ident_char = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
            while self.pos < self.bytes.len() && ident_char(self.bytes[self.pos]) {
                self.pos += 1;
            }
            // `IndClass.sector`: a dot followed by a letter continues the identifier.
            while self.pos + 1 < self.bytes.len()
                && self.bytes[self.pos] == b'.'
                && self.bytes[self.pos + 1].is_ascii_alphabetic()
            {
                self.pos += 1;
                while self.pos < self.bytes.len() && ident_char(self.bytes[self.pos]) {
                    self.pos += 1;
                }
            }
            let word = &self.text[start..self.pos];
            if word.eq_ignore_ascii_case("alpha") && self.bytes.get(self.pos) == Some(&b':') {
                let id_start = self.pos + 1;
                let mut p = id_start;
                while p < self.bytes.len()
                    && (self.bytes[p].is_ascii_alphanumeric() || matches!(self.bytes[p], b'_' | b'-' | b'.'))
                {
                    p += 1;
                }
                if p == id_start {
                    return Err(ExprError::at(self.text, span(p), "expected an alpha id after 'alpha:'"));
                }
                self.pos = p;
                return Ok((Tok::AlphaRef(self.text[id_start..p].to_string()), span(p)));
            }
            return Ok((Tok::Ident(word.to_string()), span(self.pos)));
        }
        match c {
            b'(' => {
                self.pos += 1;
                return Ok((Tok::LParen, span(self.pos)));
            }
            b')' => {
                self.pos += 1;
                return Ok((Tok::RParen, span(self.pos)));
            }
            b',' => {
                self.pos += 1;
                return Ok((Tok::Comma, span(self.pos)));
            }
            _ => {}
        }
        for op in OPS {
            if self.text[self.pos..].starts_with(op) {
                self.pos += op.len();
                return Ok((Tok::Op(op), span(self.pos)));
            }
        }
        let ch = self.text[start..].chars().next().unwrap_or('?');
        Err(ExprError::at(self.text, Span::new(start, start + ch.len_utf8()), format!("unexpected character '{ch}'")))
    }
}

struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Tok,
    span: Span,
    depth: usize,
}

/// Deepest nesting accepted; far beyond any real alpha, it keeps hostile input from
/// overflowing the stack.
const MAX_DEPTH: usize = 256;

/// Parses an expression into an AST with byte spans.
pub fn parse(text: &str) -> Result<Expr, ExprError> {
    let mut lex = Lexer { text, bytes: text.as_bytes(), pos: 0 };
    let (tok, span) = lex.next()?;
    let mut p = Parser { lex, tok, span, depth: 0 };
    if p.tok == Tok::Eof {
        return Err(ExprError::at(text, Span::new(0, 1), "empty expression"));
    }
    let e = p.ternary()?;
    if p.tok != Tok::Eof {
        return Err(p.err(format!("unexpected {} after a complete expression", describe(&p.tok))));
    }
    // The printed form (every operation in parentheses) can nest deeper than the text did:
    // `---x` is three levels, `(-(-(-x)))` six. A tree is refused here unless its printed
    // form parses too, so that printing is a fixed point (a fuzzer found 145 minus signs in
    // a row that parsed, while their printed form did not).
    if 1 + printed_depth(&e) > MAX_DEPTH {
        return Err(ExprError::at(text, e.span, format!("expression nests deeper than {MAX_DEPTH} levels once written out with its parentheses")));
    }
    Ok(e)
}

/// The levels [`Parser::enter`] counts when parsing `e`'s printed form, beyond the level of
/// the context it is parsed in.
fn printed_depth(e: &Expr) -> usize {
    match &e.kind {
        // A negative literal prints with a minus sign, which parses as a negation.
        ExprKind::Num(v) => usize::from(v.is_sign_negative()),
        ExprKind::Ident(_) | ExprKind::AlphaRef(_) => 0,
        // `f(`: one level, each argument a ternary: one more.
        ExprKind::Call { args, .. } => 1 + args.iter().map(|a| 1 + printed_depth(a)).max().unwrap_or(0),
        // `(`: a ternary; `-`: one more.
        ExprKind::Neg(a) => 2 + printed_depth(a),
        // `(`: a ternary; an exponent one more.
        ExprKind::Binary(BinOp::Pow, a, b) => 1 + printed_depth(a).max(1 + printed_depth(b)),
        ExprKind::Binary(_, a, b) => 1 + printed_depth(a).max(printed_depth(b)),
        // `(`: a ternary, and each branch a ternary of its own.
        ExprKind::Ternary(c, a, b) => 1 + printed_depth(c).max(1 + printed_depth(a)).max(1 + printed_depth(b)),
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(v) => format!("number {v}"),
        Tok::Ident(s) => format!("'{s}'"),
        Tok::AlphaRef(s) => format!("'alpha:{s}'"),
        Tok::Op(o) => format!("'{o}'"),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Comma => "','".into(),
        Tok::Eof => "end of expression".into(),
    }
}

impl<'a> Parser<'a> {
    fn bump(&mut self) -> Result<(Tok, Span), ExprError> {
        let (t, s) = self.lex.next()?;
        Ok((std::mem::replace(&mut self.tok, t), std::mem::replace(&mut self.span, s)))
    }

    fn err(&self, msg: String) -> ExprError {
        ExprError::at(self.lex.text, self.span, msg)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.tok, Tok::Op(o) if o == op)
    }

    fn expect(&mut self, want: Tok, what: &str) -> Result<Span, ExprError> {
        if self.tok == want {
            Ok(self.bump()?.1)
        } else {
            Err(self.err(format!("expected {what}, found {}", describe(&self.tok))))
        }
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("expression nests deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn ternary(&mut self) -> Result<Expr, ExprError> {
        self.enter()?;
        let cond = self.binary(0)?;
        let out = if self.is_op("?") {
            self.bump()?;
            let a = self.ternary()?;
            if !self.is_op(":") {
                return Err(self.err(format!("expected ':' of 'c ? x : y', found {}", describe(&self.tok))));
            }
            self.bump()?;
            let b = self.ternary()?;
            let span = cond.span.to(b.span);
            Expr { kind: ExprKind::Ternary(Box::new(cond), Box::new(a), Box::new(b)), span }
        } else {
            cond
        };
        self.depth -= 1;
        Ok(out)
    }

    /// Binary operators by precedence level (0 = `||`).
    fn binary(&mut self, level: usize) -> Result<Expr, ExprError> {
        const LEVELS: &[&[(&str, BinOp)]] = &[
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[("<", BinOp::Lt), (">", BinOp::Gt), ("<=", BinOp::Le), (">=", BinOp::Ge), ("==", BinOp::Eq), ("!=", BinOp::Ne)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary(level + 1)?;
        while let Tok::Op(o) = self.tok {
            let Some(&(_, op)) = LEVELS[level].iter().find(|(s, _)| *s == o) else { break };
            self.bump()?;
            let rhs = self.binary(level + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.is_op("-") || self.is_op("+") {
            self.enter()?;
            let (t, s) = self.bump()?;
            let inner = self.unary()?;
            self.depth -= 1;
            let span = s.to(inner.span);
            return Ok(if t == Tok::Op("-") { Expr { kind: ExprKind::Neg(Box::new(inner)), span } } else { inner });
        }
        let base = self.primary()?;
        if self.is_op("^") {
            self.bump()?;
            self.enter()?;
            let exp = self.unary()?;
            self.depth -= 1;
            let span = base.span.to(exp.span);
            return Ok(Expr { kind: ExprKind::Binary(BinOp::Pow, Box::new(base), Box::new(exp)), span });
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<Expr, ExprError> {
        let (tok, span) = self.bump()?;
        match tok {
            Tok::Num(v) => Ok(Expr { kind: ExprKind::Num(v), span }),
            Tok::AlphaRef(id) => Ok(Expr { kind: ExprKind::AlphaRef(id), span }),
            Tok::LParen => {
                let e = self.ternary()?;
                self.expect(Tok::RParen, "')'")?;
                Ok(e)
            }
            Tok::Ident(name) => {
                if self.tok != Tok::LParen {
                    return Ok(Expr { kind: ExprKind::Ident(name), span });
                }
                self.bump()?;
                self.enter()?;
                let mut args = Vec::new();
                if self.tok != Tok::RParen {
                    loop {
                        args.push(self.ternary()?);
                        if self.tok == Tok::Comma {
                            self.bump()?;
                            continue;
                        }
                        break;
                    }
                }
                let close = self.expect(Tok::RParen, "',' or ')'")?;
                self.depth -= 1;
                Ok(Expr { kind: ExprKind::Call { name, name_span: span, args }, span: span.to(close) })
            }
            other => Err(ExprError::at(self.lex.text, span, format!("expected a value, found {}", describe(&other)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(s: &str) -> String {
        parse(s).map(|e| e.to_string()).unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn alpha_refs_lists_every_named_alpha_in_order() {
        let e = parse("alpha:a + rank(ts_max(alpha:b_1, 3)) * (x > 0 ? -alpha:a : alpha:c)").expect("parses");
        assert_eq!(e.alpha_refs(), ["a", "b_1", "a", "c"]);
        assert!(parse("rank(close)").expect("parses").alpha_refs().is_empty());
    }

    #[test]
    fn precedence_and_literals() {
        assert_eq!(show("1 + 2 * 3"), "(1 + (2 * 3))");
        assert_eq!(show("-x^2"), "(-(x ^ 2))");
        assert_eq!(show("a ? b : c ? d : e"), "(a ? b : (c ? d : e))");
        assert_eq!(show("a < b || c == d && e"), "((a < b) || ((c == d) && e))");
        assert_eq!(show("2. + .001"), "(2 + 0.001)");
        assert_eq!(show("1e-3*x"), "(0.001 * x)");
        assert_eq!(show("IndNeutralize(x, IndClass.sector)"), "IndNeutralize(x, IndClass.sector)");
        assert_eq!(show("alpha:alpha101_001 + 1"), "(alpha:alpha101_001 + 1)");
    }

    #[test]
    fn what_parses_prints_as_what_parses_however_deep() {
        for n in [50, 100, 127, 128, 200, 254, 300] {
            for text in [
                format!("{}close", "-".repeat(n)),
                format!("close{}", " + close".repeat(n)),
                format!("{}close{}", "rank(".repeat(n), ")".repeat(n)),
                format!("{}close", "x ? ".repeat(n).replace('?', "? y :")),
                format!("close{}", " ^ 2".repeat(n)),
            ] {
                let Ok(tree) = parse(&text) else { continue };
                let printed = tree.to_string();
                let again = parse(&printed).unwrap_or_else(|e| panic!("{n}: {text:.40}... prints as one that does not parse: {e}"));
                assert_eq!(again.to_string(), printed);
            }
        }
        // Deep enough to parse, too deep once written out: refused, with the reason.
        let e = parse(&format!("{}close", "-".repeat(200))).expect_err("printed too deep");
        assert!(e.msg.contains("once written out"), "{}", e.msg);
        assert!(parse(&format!("{}close", "-".repeat(100))).is_ok());
    }

    #[test]
    fn errors_point_at_position() {
        let e = parse("rank(close,").expect_err("incomplete");
        assert_eq!(e.pos, 12);
        let e = parse("rank(close))").expect_err("extra paren");
        assert_eq!(e.pos, 12);
        assert!(e.msg.contains("unexpected ')'"));
        let e = parse("close $ open").expect_err("bad char");
        assert_eq!((e.pos, e.msg.as_str()), (7, "unexpected character '$'"));
        assert!(parse("").is_err());
        assert!(parse("a ? b").expect_err("no colon").msg.contains("':'"));
        let deep = format!("{}x{}", "(".repeat(1000), ")".repeat(1000));
        assert!(parse(&deep).expect_err("too deep").msg.contains("nests deeper"));
    }
}
