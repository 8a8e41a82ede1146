//! The writer builds on the knowledge base and the judge remembers, on the real sample with
//! a real KB: the writer is shown accepted alphas under labels, an `alpha:LABEL` it writes
//! evaluates as that alpha and is kept in the record's lineage, the records it cites on its
//! `USES:` line gain importance when the alpha is accepted and lose some when it is not,
//! and the judge's prompt carries the stored attempts nearest to the candidate with how
//! they ended. The replies here are scripted (what a model might say); the real local
//! model writes the same format in the recorded mining runs (tests/mine.rs) and keeps to
//! the labels it was shown under its grammar (tests/llm.rs).

mod common;

use alphaloop::agent::{Accept, Idea, MineConfig, Miner, Templates};
use alphaloop::backtest::{MetricsConfig, MiningView};
use alphaloop::kb::{io, Kb, Location};
use alphaloop::llm::{ChatRequest, LanguageModel, LlmError, Reply};
use common::sample;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

fn view() -> &'static MiningView {
    static V: OnceLock<MiningView> = OnceLock::new();
    V.get_or_init(|| MiningView::new(sample(), &common::sample_splits(), MetricsConfig::default()).expect("view"))
}

/// A KB at `dir` holding the seeds `ids` as accepted alphas.
fn kb_with(dir: &Path, ids: &[&str]) -> Kb {
    let mut kb = Kb::open(&Location::Dir(dir.to_path_buf()), alphaloop::kb::default_embedder(None).expect("embedding model")).expect("kb");
    let defs: Vec<_> = alphaloop::seeds::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/seeds/alpha101.toml"))
        .expect("seeds")
        .into_iter()
        .filter(|d| ids.contains(&d.id.as_str()))
        .collect();
    let spec = kb.behaviour_sample(sample(), &common::sample_splits()).expect("sample");
    let items = io::evaluate_defs(&defs, &alphaloop::expr::NoAlphas, view(), &spec, "seed", |_| {});
    io::store_all(&kb, items, |_| {}).expect("stored");
    kb
}

/// Replies by role, and every prompt it was sent.
struct Scripted {
    writer: String,
    prompts: Mutex<Vec<(String, String)>>,
}

impl LanguageModel for Scripted {
    fn chat(&self, req: &ChatRequest) -> Result<Reply, LlmError> {
        let user = req.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        self.prompts.lock().expect("lock").push((req.system.clone(), user));
        let text = if req.system.contains("writes formulaic stock alphas") {
            self.writer.clone()
        } else if req.system.contains("You review") {
            "SCORE: 9\nADVICE: Keep it.".to_string()
        } else {
            "It worked.".to_string()
        };
        Ok(Reply { text, prompt_tokens: 10, completion_tokens: 5, ..Reply::default() })
    }
    fn name(&self) -> String {
        "scripted".into()
    }
}

const SET: [&str; 3] = ["alpha101_012", "alpha101_033", "alpha101_101"];

fn miner<'a>(kb: &'a Kb, llm: &'a Scripted) -> Miner<'a> {
    let spec = kb.meta().behaviour.clone().expect("a behaviour sample");
    let templates = Templates::load(&Templates::default_dir()).expect("templates");
    // Stand-alone bars at zero and no refiner: the scripted formula is the one judged.
    let cfg = MineConfig { rounds: 1, refine_budget: 0, accept: Accept::Standalone, min_train_rank_ic: 0.0, min_valid_rank_ic: 0.0, ..MineConfig::default() };
    Miner::new(llm, kb, view(), spec, cfg, templates, "w".into(), false).expect("miner")
}

fn scripted(writer: &str) -> Scripted {
    Scripted { writer: writer.into(), prompts: Mutex::new(Vec::new()) }
}

fn mine(kb: &Kb, writer: &str) -> (alphaloop::agent::Outcome, Vec<(String, String)>, String) {
    let llm = scripted(writer);
    let m = miner(kb, &llm);
    let idea = Idea { id: "i".into(), family: "reversal".into(), hypothesis: "Stocks whose price fell while volume rose rebound over the next days.".into(), parents: Vec::new() };
    let out = m.mine_idea(&idea, 0, 1).expect("mined");
    drop(m);
    let prompts = llm.prompts.into_inner().expect("lock");
    // The id the writer saw as A1.
    let writer = &prompts.iter().find(|p| p.0.contains("writes formulaic")).expect("a writer prompt").1;
    let a1 = writer.lines().find_map(|l| l.strip_prefix("- A1: ")).expect("an accepted alpha labelled A1").split("  (valid").next().expect("code").to_string();
    (out, prompts, a1)
}

/// The seed whose formula is `code`.
fn seed_id(kb: &Kb, code: &str) -> String {
    SET.iter().map(|id| kb.get(id).expect("get").expect("stored")).find(|r| r.code == code).map(|r| r.id).expect("a seed's formula")
}

#[test]
fn an_alpha_reference_evaluates_is_kept_in_lineage_and_credits_what_was_cited() {
    let dir = tempfile::tempdir().expect("tmp");
    let kb = kb_with(dir.path(), &SET);
    let (out, prompts, a1) = mine(&kb, "USES: A1\nrank(alpha:A1) * 0.3 + rank(ts_mean(returns, 5))");
    let id = seed_id(&kb, &a1);
    assert_eq!(out.code, format!("rank((alpha:{id})) * 0.3 + rank(ts_mean(returns, 5))"));
    assert_eq!(out.status, "accepted", "{out:?}");
    let rec = kb.get(&out.record_id).expect("get").expect("stored");
    assert_eq!(rec.parents, [id.clone()], "lineage: the alpha named and cited");
    assert!(rec.metrics["train"].rank_ic.is_finite());
    let cited = kb.get(&id).expect("get").expect("stored");
    assert!(cited.importance.expect("set") > 0.5, "{:?}", cited.importance);
    // The others were not cited: untouched.
    assert!(SET.iter().filter(|s| **s != id).all(|s| kb.get(s).expect("get").expect("stored").importance.is_none()));

    // The judge's own retrieval: the accepted seeds nearest the candidate's code, with how
    // they ended.
    let judge = &prompts.iter().find(|p| p.0.contains("You review")).expect("a judge prompt").1;
    assert!(judge.contains("Similar earlier attempts and how they ended:"), "{judge}");
    assert!(judge.contains(": accepted (valid Rank IC "), "{judge}");
    assert!(judge.contains("Weakest point: ") && judge.contains("Rank IC by training year: 2015 "), "{judge}");
}

#[test]
fn a_cited_record_loses_importance_when_the_alpha_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let kb = kb_with(dir.path(), &SET);
    // A copy of A1: refused by the exact correlation check.
    let (out, _, a1) = mine(&kb, "USES: A1\nrank(alpha:A1)");
    let id = seed_id(&kb, &a1);
    assert_eq!(out.status, "rejected", "{out:?}");
    assert!(out.reason.starts_with(&format!("too correlated with accepted alpha {id}")), "{}", out.reason);
    let imp = kb.get(&id).expect("get").expect("stored").importance.expect("set");
    assert!(imp < 0.5, "{imp}");
}

/// The outer loop's actions: refine an accepted alpha on its weakest point, or combine two;
/// the alphas are drawn from the accepted set (the same draw for the same idea number),
/// shown in the idea the writer gets, and kept as the record's parents.
#[test]
fn actions_start_from_accepted_alphas_and_keep_them_in_lineage() {
    let dir = tempfile::tempdir().expect("tmp");
    let kb = kb_with(dir.path(), &SET[..1]);
    let llm = scripted("USES: none\nrank(ts_mean(returns, 5))");
    let m = miner(&kb, &llm);
    let seed = kb.get(SET[0]).expect("get").expect("stored");
    assert_eq!(m.actions_open().expect("kb"), ["refine"], "one accepted alpha: refine only");
    assert!(m.action_idea("combine", 3).expect("kb").is_none());
    let refine = m.action_idea("refine", 3).expect("kb").expect("an idea");
    assert_eq!((refine.family.as_str(), refine.parents.clone()), ("refine", vec![seed.id.clone()]));
    assert!(refine.hypothesis.contains(&seed.code) && refine.hypothesis.contains("weakest point"), "{}", refine.hypothesis);
    let out = m.mine_idea(&refine, 0, 3).expect("mined");
    let rec = kb.get(&out.record_id).expect("get").expect("stored");
    assert_eq!(rec.parents, [seed.id.clone()]);
    assert_eq!(rec.family, "refine");
    drop(m);

    let dir = tempfile::tempdir().expect("tmp");
    let kb = kb_with(dir.path(), &SET);
    let m = miner(&kb, &llm);
    assert_eq!(m.actions_open().expect("kb"), ["refine", "combine"]);
    let combine = m.action_idea("combine", 5).expect("kb").expect("an idea");
    assert_eq!(combine.parents.len(), 2);
    assert_ne!(combine.parents[0], combine.parents[1]);
    for p in &combine.parents {
        assert!(combine.hypothesis.contains(&kb.get(p).expect("get").expect("stored").code), "{}", combine.hypothesis);
    }
    assert_eq!(m.action_idea("combine", 5).expect("kb"), Some(combine), "the same draw for the same idea number");
}
