//! `alphaloop kb leaderboard` (and `study --leaderboard`): the idea-relevance leaderboard
//! written out as a table, `leaderboard.json`, `pairs.jsonl` and `heatmap.png`.

use super::table::{num, render};
use super::Config;
use crate::agent::relevance::{self, Group};
use crate::agent::Templates;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The judge and the draws.
#[derive(clap::Args, Debug, Clone)]
pub struct JudgeArgs {
    /// Pairs drawn for every two groups (each asked in both orders).
    #[arg(long, default_value_t = 20)]
    pub pairs: usize,
    /// Seed of the draws.
    #[arg(long = "pair-seed", default_value_t = 0)]
    pub pair_seed: u64,
    /// The judge: `local` (the embedded model) or `openai:MODEL`.
    #[arg(long = "judge", default_value = "local")]
    pub judge: String,
    /// The local judge's GGUF: `small`, `medium` or a path (default as for `mine`).
    #[arg(long = "judge-model")]
    pub judge_model: Option<PathBuf>,
    /// Replay the judge's replies recorded by an earlier leaderboard (its replies.jsonl).
    #[arg(long = "judge-replay")]
    pub judge_replay: Option<PathBuf>,
}

/// Every group's mined alphas judged in pairs; the files written into `out`.
/// The progress bar is hidden when `quiet`.
pub fn run(groups: &[Group], judge: &JudgeArgs, cfg: &Config, out: &Path, quiet: bool) -> Result<relevance::Leaderboard> {
    let usable = groups.iter().filter(|g| !g.alphas.is_empty()).count();
    if usable < 2 {
        let sizes: Vec<String> = groups.iter().map(|g| format!("{} {}", g.name, g.alphas.len())).collect();
        anyhow::bail!("the leaderboard needs two groups with mined alphas to compare; mined alphas per group: {}", sizes.join(", "));
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let llm = super::mine::open_model(&judge.judge, judge.judge_model.as_deref(), 0, cfg, &out.join("replies.jsonl"), judge.judge_replay.as_deref())?;
    let templates = Templates::load(&Templates::default_dir())?;
    let total = usable * (usable - 1) / 2 * judge.pairs;
    let pb = super::progress(total as u64, quiet, "judging pairs");
    let constrained = judge.judge == "local";
    let board = relevance::leaderboard(llm.as_ref(), &templates, groups, judge.pairs, judge.pair_seed, constrained, || pb.inc(1))?;
    pb.finish_and_clear();
    let mut lines = String::new();
    for p in &board.pairs {
        lines.push_str(&serde_json::to_string(p)?);
        lines.push('\n');
    }
    std::fs::write(out.join("pairs.jsonl"), lines)?;
    std::fs::write(out.join("leaderboard.json"), serde_json::to_string_pretty(&board)?)?;
    crate::model::plot::heatmap(&out.join("heatmap.png"), "Idea relevance: win rate, both orders asked", &board.groups, &board.win_rate).map_err(anyhow::Error::msg)?;
    Ok(board)
}

/// The leaderboard as a table (or JSON) on stdout.
pub fn show(board: &relevance::Leaderboard, out: &Path, json: bool) -> Result<()> {
    let png = out.join("heatmap.png");
    if json {
        println!("{}", serde_json::to_string_pretty(&board)?);
    } else {
        let mut header = vec!["group".to_string(), "alphas".into()];
        header.extend(board.groups.iter().map(|g| format!("vs {g}")));
        header.push("overall".into());
        let rows: Vec<Vec<String>> = board
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut row = vec![g.clone(), board.sizes[i].to_string()];
                row.extend(board.win_rate[i].iter().map(|v| v.map_or("-".into(), num)));
                row.push(board.overall[i].map_or("-".into(), num));
                row
            })
            .collect();
        let h: Vec<&str> = header.iter().map(String::as_str).collect();
        println!("{}", render(&h, &rows));
        println!(
            "about {} pairs per two groups with alphas, each asked in both orders (a choice that flips with the order is a tie); the judge chose the alpha shown first in {:.0}% of its answers",
            board.pairs.len() / (board.groups.len() * (board.groups.len() - 1) / 2).max(1),
            board.first_shown_chosen * 100.0
        );
        println!("wrote {}, {} and {}", out.join("leaderboard.json").display(), out.join("pairs.jsonl").display(), png.display());
    }
    Ok(())
}
