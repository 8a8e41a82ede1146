//! A GBNF grammar for alpha expressions, generated from the operator catalogue so it can
//! never drift from the parser: every operator with its exact arity, the data fields,
//! windows as positive integers and group levels. Used with the local model so that a
//! small model always emits a parseable expression when asked for one.
//!
//! The grammar is a subset of the language (no comparisons or ternaries; `+ - * /` and
//! the operators the writer is shown as calls), which is what the writer is asked for;
//! everything it accepts parses.

use crate::expr::ops::{Param, CATALOGUE};

/// Fields offered to the writer (stored and derived).
pub const FIELDS: &[&str] = &["open", "high", "low", "close", "volume", "returns", "vwap", "adv5", "adv10", "adv20", "adv60", "adv120"];

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The GBNF text over the standard [`FIELDS`]; the start rule is `root`.
pub fn expression_gbnf() -> String {
    expression_gbnf_with(&[])
}

/// [`expression_gbnf`], offering `extra` fields of the data as well.
pub fn expression_gbnf_with(extra: &[String]) -> String {
    let mut calls = Vec::new();
    // Only the operators the writer is shown as calls (their doc begins `name(`): the
    // internal forms of infix ones (`lt(`, `and(`, `where(`, `pow(`, `add(`) parse, but the
    // prompt never offers them, and a small model reached for them only inside runaway
    // replies (`-volume-and(1-volume-and(2-…` until the token limit: 18 of 108 recorded
    // writer replies, none otherwise; experiments/2026-11-28-writer-grammar).
    for op in CATALOGUE.iter().filter(|o| !o.params.is_empty() && o.doc.starts_with(&format!("{}(", o.name))) {
        let mut rule = format!("{} ws", quote(&format!("{}(", op.name)));
        for (i, p) in op.params.iter().enumerate() {
            let sep = if i == 0 { String::new() } else { " \",\" ws".to_string() };
            let arg = match p {
                Param::Series => "expr".to_string(),
                Param::Window => "window".to_string(),
                Param::Group => "group".to_string(),
                Param::Level => "level".to_string(),
                Param::Optional(_) => {
                    rule.push_str(" (\",\" ws expr ws)?");
                    continue;
                }
            };
            rule.push_str(&format!("{sep} {arg} ws"));
        }
        rule.push_str(" \")\"");
        calls.push(rule);
    }
    let fields: Vec<String> = FIELDS.iter().copied().chain(extra.iter().map(String::as_str)).map(quote).collect();
    format!(
        "root ::= expr\n\
         expr ::= prod (ws [-+] ws prod)*\n\
         prod ::= unary (ws [*/] ws unary)*\n\
         unary ::= \"-\" unary | atom\n\
         atom ::= call | field | number | \"(\" ws expr ws \")\"\n\
         call ::= {}\n\
         field ::= {}\n\
         group ::= \"IndClass.sector\" | \"IndClass.industry\" | \"IndClass.subindustry\"\n\
         window ::= [1-9] [0-9]? [0-9]?\n\
         level ::= \"0\" (\".\" [0-9] [0-9]?)? | \"1\"\n\
         number ::= [0-9] [0-9]? [0-9]? (\".\" [0-9] [0-9]? [0-9]?)?\n\
         ws ::= \" \"?\n",
        calls.join(" | "),
        fields.join(" | ")
    )
}

/// The expression writer's reply: `USES: ` with the labels of the shown records it built
/// on (`cites`, or `none`), a line break, then the expression, in which `alpha:LABEL` may
/// name exactly the accepted alphas it was shown (`alphas`): an id it was not shown cannot
/// be sampled.
pub fn writer_gbnf(extra: &[String], alphas: &[String], cites: &[String]) -> String {
    let base = expression_gbnf_with(extra);
    let body = base.strip_prefix("root ::= expr\n").unwrap_or(&base);
    let one_of = |items: Vec<String>| items.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" | ");
    let mut g = String::from("root ::= \"USES: \" uses \"\\n\" expr\n");
    if cites.is_empty() {
        g.push_str("uses ::= \"none\"\n");
    } else {
        // At most as many labels as were shown (nested optionals): unbounded, a small model
        // cited `A1, F1, A1, F1, …` until the token limit.
        let more = (1..cites.len()).fold(String::new(), |inner, _| format!(" (\", \" label{inner})?"));
        g.push_str(&format!("uses ::= \"none\" | label{more}\nlabel ::= {}\n", one_of(cites.to_vec())));
    }
    if alphas.is_empty() {
        g.push_str(body);
    } else {
        g.push_str(&body.replace("atom ::= call | field | number", "atom ::= call | field | number | alpharef"));
        g.push_str(&format!("alpharef ::= {}\n", one_of(alphas.iter().map(|a| format!("alpha:{a}")).collect())));
    }
    g
}

/// One sentence of prose: starts with a letter, ends with a full stop, no line breaks; a
/// full stop followed by a digit (`0.005`) stays inside the sentence.
const SENTENCE: &str = "sentence ::= [A-Za-z] ([^.\\n] | \".\" [0-9])* \".\"\n";

/// Prose of one to `n` sentences on one line. Small models otherwise ramble until the
/// token limit, which costs generation time and crowds later prompts.
pub fn sentences_gbnf(n: usize) -> String {
    let more = " (\" \" sentence)?".repeat(n.saturating_sub(1));
    format!("root ::= sentence{more}\n{SENTENCE}")
}

/// The judge's review: `SCORE: 0-10`, a line break, `ADVICE:` and one or two sentences.
pub fn review_gbnf() -> String {
    format!("root ::= \"SCORE: \" (\"10\" | [0-9]) \"\\nADVICE: \" sentence (\" \" sentence)?\n{SENTENCE}")
}

/// Exactly one of `options`, nothing else.
pub fn choice_gbnf(options: &[&str]) -> String {
    format!("root ::= {}", options.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>().join(" | "))
}

/// A generated idea: `HYPOTHESIS:` and one or two sentences.
pub fn hypothesis_gbnf() -> String {
    format!("root ::= \"HYPOTHESIS: \" sentence (\" \" sentence)?\n{SENTENCE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_may_name_only_the_alphas_and_records_it_was_shown() {
        let g = writer_gbnf(&[], &["A1".into(), "A2".into()], &["A1".into(), "A2".into(), "F1".into()]);
        assert!(g.starts_with("root ::= \"USES: \" uses \"\\n\" expr\n"), "{g}");
        assert!(g.contains("label ::= \"A1\" | \"A2\" | \"F1\"\n"), "{g}");
        assert!(g.contains("uses ::= \"none\" | label (\", \" label (\", \" label)?)?\n"), "{g}");
        assert!(g.contains("atom ::= call | field | number | alpharef |"), "{g}");
        assert!(g.contains("alpharef ::= \"alpha:A1\" | \"alpha:A2\"\n"), "{g}");
        assert_eq!(g.matches("alpha:").count(), 2, "{g}");
        // Nothing shown: no alpha reference at all, and `USES: none` only.
        let bare = writer_gbnf(&[], &[], &[]);
        assert!(!bare.contains("alpharef") && !bare.contains("alpha:") && bare.contains("uses ::= \"none\"\n"), "{bare}");
        assert_eq!(bare.lines().filter(|l| l.starts_with("root ::=")).count(), 1);
    }

    #[test]
    fn extra_fields_join_the_field_rule() {
        let field_rule = |g: &str| g.lines().find(|l| l.starts_with("field ::=")).map(str::to_string).unwrap_or_default();
        let plain = field_rule(&expression_gbnf());
        let extra = field_rule(&expression_gbnf_with(&["pe_ratio".to_string()]));
        assert!(!plain.contains("pe_ratio"));
        assert_eq!(extra, format!("{plain} | \"pe_ratio\""));
    }

    #[test]
    fn grammar_names_every_operator_it_offers_once_and_only_known_ones() {
        let g = expression_gbnf();
        assert!(g.contains("\"rank(\""));
        assert!(g.contains("\"ts_corr(\" ws expr ws \",\" ws expr ws \",\" ws window ws \")\""));
        assert!(g.contains("\"indneutralize(\" ws expr ws \",\" ws group ws \")\""));
        let calls = g.lines().find(|l| l.starts_with("call ::=")).expect("call rule");
        for alt in calls["call ::=".len()..].split(" | ") {
            let name = alt.split('"').nth(1).unwrap_or("").trim_end_matches('(');
            assert!(crate::expr::ops::lookup(name).is_some(), "unknown operator {name}");
        }
        for internal in ["min2(", "add(", "pow(", "lt(", "and(", "or(", "where("] {
            assert!(!g.contains(&format!("\"{internal}\"")), "{internal}");
        }
    }
}
