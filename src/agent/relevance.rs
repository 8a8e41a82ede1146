//! The idea-relevance leaderboard (QuantAgent's Fig. 4): does a later generation of alphas,
//! or one arm of a study, express its ideas better than another? An LLM judge is shown two
//! alphas, each with its own idea, and asked which formula better expresses its idea; every
//! pair is asked in both orders, and only a choice that survives the swap counts as a win
//! (models favour the first or the second answer whatever it says: the share of "A"
//! replies is reported). The result is a win-rate matrix across groups.

use super::gp::Rng;
use super::{AgentError, Templates};
use crate::kb::{AlphaRecord, Kind, Status};
use crate::llm::{ChatRequest, LanguageModel, Message};
use serde::{Deserialize, Serialize};

/// A set of alphas compared as one: a quartile of a KB's mining order, or an arm.
pub struct Group {
    pub name: String,
    pub alphas: Vec<AlphaRecord>,
}

/// The mined alphas of a KB worth judging: written for an idea by a run (not imported),
/// expressions that evaluated, in the order they were mined.
pub fn mined(mut records: Vec<AlphaRecord>) -> Vec<AlphaRecord> {
    records.retain(|r| !r.run_id.is_empty() && r.kind == Kind::Expression && !matches!(r.status, Status::Error { .. }) && !idea(r).is_empty());
    records.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
    records
}

/// `records` (in mining order) cut into `k` groups of consecutive alphas, Q1 the earliest.
pub fn quantiles(records: Vec<AlphaRecord>, k: usize) -> Vec<Group> {
    let n = records.len();
    let mut groups: Vec<Group> = (0..k).map(|i| Group { name: format!("Q{}", i + 1), alphas: Vec::new() }).collect();
    for (i, r) in records.into_iter().enumerate() {
        groups[i * k / n.max(1)].alphas.push(r);
    }
    groups
}

fn idea(r: &AlphaRecord) -> &str {
    if r.hypothesis.is_empty() {
        &r.idea
    } else {
        &r.hypothesis
    }
}

/// One pair, asked in both orders.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Judged {
    /// Indices of the groups `x` and `y` come from.
    pub groups: (usize, usize),
    pub x: String,
    pub y: String,
    /// The replies with `x` shown as A, and with `y` shown as A.
    pub x_first: String,
    pub y_first: String,
    /// `x`, `y`, or `tie` when the choice did not survive the swap.
    pub winner: String,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Leaderboard {
    pub groups: Vec<String>,
    /// Alphas per group.
    pub sizes: Vec<usize>,
    /// `win_rate[i][j]`: the share of pairs group i won against group j, a tie counting
    /// half (None on the diagonal and where a group has no alphas).
    pub win_rate: Vec<Vec<Option<f64>>>,
    /// Each group's mean win rate against the others.
    pub overall: Vec<Option<f64>>,
    /// The share of replies that chose whichever alpha was shown first: far from 0.5, the
    /// judge has a position bias that asking both orders cancels.
    pub first_shown_chosen: f64,
    pub pairs: Vec<Judged>,
    pub seed: u64,
}

/// The letter a reply chose: its first A or B standing alone, or at its start.
pub fn choice(reply: &str) -> Option<char> {
    let t = reply.trim().trim_start_matches(['*', '"', '\'', '(']);
    let first = t.chars().next()?.to_ascii_uppercase();
    let alone = t.chars().nth(1).is_none_or(|c| !c.is_ascii_alphanumeric());
    if matches!(first, 'A' | 'B') && alone {
        return Some(first);
    }
    t.split(|c: char| !c.is_ascii_alphanumeric()).find_map(|w| match w {
        "A" => Some('A'),
        "B" => Some('B'),
        _ => None,
    })
}

/// Judges `pairs` pairs drawn (seeded) for every two groups that have alphas.
/// `constrained`: the model takes a GBNF grammar (the local one), which makes its reply
/// exactly one letter.
pub fn leaderboard(llm: &dyn LanguageModel, templates: &Templates, groups: &[Group], pairs: usize, seed: u64, constrained: bool, mut progress: impl FnMut()) -> Result<Leaderboard, AgentError> {
    let system = templates.render("relevance_system.md", minijinja::context! {})?;
    let grammar = constrained.then(|| crate::llm::grammar::choice_gbnf(&["A", "B"]));
    let ask = |a: &AlphaRecord, b: &AlphaRecord, n: u32| -> Result<String, AgentError> {
        let user = templates.render("relevance_user.md", minijinja::context! { idea_a => idea(a), code_a => a.code, idea_b => idea(b), code_b => b.code })?;
        let req = ChatRequest { system: system.clone(), messages: vec![Message::user(user)], temperature: 0.0, max_tokens: 4, stop: Vec::new(), grammar: grammar.clone(), json: false, seed: n };
        Ok(llm.chat(&req)?.text)
    };
    let k = groups.len();
    let mut judged = Vec::new();
    let (mut first_chosen, mut answered) = (0usize, 0usize);
    for i in 0..k {
        for j in i + 1..k {
            let (gi, gj) = (&groups[i].alphas, &groups[j].alphas);
            if gi.is_empty() || gj.is_empty() {
                continue;
            }
            let mut rng = Rng::new(seed ^ ((i as u64) << 20 | j as u64));
            for p in 0..pairs {
                let (x, y) = (&gi[rng.below(gi.len())], &gj[rng.below(gj.len())]);
                let n = (p as u32) << 1;
                let (x_first, y_first) = (ask(x, y, n)?, ask(y, x, n | 1)?);
                let (cx, cy) = (choice(&x_first), choice(&y_first));
                for c in [cx, cy].into_iter().flatten() {
                    answered += 1;
                    first_chosen += usize::from(c == 'A');
                }
                let winner = match (cx, cy) {
                    (Some('A'), Some('B')) => "x",
                    (Some('B'), Some('A')) => "y",
                    _ => "tie",
                };
                judged.push(Judged { groups: (i, j), x: x.id.clone(), y: y.id.clone(), x_first, y_first, winner: winner.into() });
                progress();
            }
        }
    }
    Ok(tally(groups, judged, first_chosen as f64 / answered.max(1) as f64, seed))
}

/// The win-rate matrix of judged pairs.
pub fn tally(groups: &[Group], pairs: Vec<Judged>, first_shown_chosen: f64, seed: u64) -> Leaderboard {
    let k = groups.len();
    // (points, pairs) of group i against group j.
    let mut score = vec![vec![(0.0f64, 0usize); k]; k];
    for p in &pairs {
        let (i, j) = p.groups;
        let x = match p.winner.as_str() {
            "x" => 1.0,
            "y" => 0.0,
            _ => 0.5,
        };
        score[i][j].0 += x;
        score[i][j].1 += 1;
        score[j][i].0 += 1.0 - x;
        score[j][i].1 += 1;
    }
    let win_rate: Vec<Vec<Option<f64>>> = score.iter().map(|row| row.iter().map(|&(s, n)| (n > 0).then(|| s / n as f64)).collect()).collect();
    let overall = win_rate
        .iter()
        .map(|row| {
            let v: Vec<f64> = row.iter().flatten().copied().collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        })
        .collect();
    Leaderboard { groups: groups.iter().map(|g| g.name.clone()).collect(), sizes: groups.iter().map(|g| g.alphas.len()).collect(), win_rate, overall, first_shown_chosen, pairs, seed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_s_choice_is_its_lone_letter() {
        assert_eq!(choice("A"), Some('A'));
        assert_eq!(choice(" b\n"), Some('B'));
        assert_eq!(choice("**B** is closer"), Some('B'));
        assert_eq!(choice("Answer: A"), Some('A'));
        assert_eq!(choice("Both are fine"), None);
        assert_eq!(choice(""), None);
    }

    #[test]
    fn quartiles_keep_mining_order_and_split_evenly() {
        let recs: Vec<AlphaRecord> = (0..10).map(|i| AlphaRecord::new(format!("r{i}"), Kind::Expression, "close", Status::Accepted)).collect();
        let g = quantiles(recs, 4);
        assert_eq!(g.iter().map(|g| g.alphas.len()).collect::<Vec<_>>(), [3, 2, 3, 2]);
        assert_eq!(g.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["Q1", "Q2", "Q3", "Q4"]);
        assert_eq!(g[0].alphas[0].id, "r0");
        assert_eq!(g[3].alphas[1].id, "r9");
    }

    #[test]
    fn a_choice_that_flips_with_the_order_is_a_tie() {
        let g = |n: &str| Group { name: n.into(), alphas: Vec::new() };
        let j = |w: &str| Judged { groups: (0, 1), x: "a".into(), y: "b".into(), x_first: String::new(), y_first: String::new(), winner: w.into() };
        let l = tally(&[g("Q1"), g("Q2")], vec![j("x"), j("x"), j("tie"), j("y")], 0.5, 0);
        assert_eq!(l.win_rate[0][1], Some(2.5 / 4.0));
        assert_eq!(l.win_rate[1][0], Some(1.5 / 4.0));
        assert_eq!(l.win_rate[0][0], None);
        assert_eq!(l.overall, vec![Some(0.625), Some(0.375)]);
    }
}
