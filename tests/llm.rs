//! The embedded LLM (Qwen2.5-Coder 0.5B GGUF through llama.cpp, assembled by scripts/setup):
//! grammar-constrained replies always parse, the shared prompt prefix is reused from the KV
//! cache, and the reply cache records and replays real replies.

mod common;

use alphaloop::expr::{Compiler, NoAlphas, Schema};
use alphaloop::llm::cache::{CachedModel, Mode};
use alphaloop::llm::local::LocalModel;
use alphaloop::llm::{grammar, ChatRequest, LanguageModel, LlmError};
use std::sync::OnceLock;

fn model() -> &'static LocalModel {
    static M: OnceLock<LocalModel> = OnceLock::new();
    M.get_or_init(|| LocalModel::load(&alphaloop::llm::default_gguf(), 4096, 0).expect("GGUF installed by scripts/setup"))
}

const SYSTEM: &str = "You write formulaic stock alphas in a small expression language. Fields: open, high, low, close, volume, returns, vwap, adv20. Operators include rank(x), ts_mean(x, d), ts_std(x, d), ts_corr(x, y, d), delta(x, d), delay(x, d), ts_rank(x, d). Reply with one expression only.";

#[test]
fn grammar_constrained_replies_always_parse_and_compile() {
    let m = model();
    let g = grammar::expression_gbnf();
    let ideas = ["stocks whose volume rises while price falls", "short-term reversal", "low volatility", "momentum over a month", "price near its 20-day high"];
    let mut c = Compiler::new(Schema::of(common::sample()), &NoAlphas);
    for (i, idea) in ideas.iter().enumerate() {
        let mut req = ChatRequest::new(SYSTEM, format!("Idea: {idea}. Write the alpha."));
        req.grammar = Some(g.clone());
        req.max_tokens = 60;
        req.seed = i as u32;
        let r = m.chat(&req).expect("reply");
        assert!(r.completion_tokens > 0);
        c.add(r.text.trim()).unwrap_or_else(|e| panic!("reply {:?} does not compile: {e}", r.text));
    }
}

#[test]
fn the_shared_prefix_is_reused_and_the_cache_replays() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("replies.jsonl");
    let rec = CachedModel::open(Some(model()), &model().name(), &path, Mode::Record).expect("cache");
    let mut req = ChatRequest::new(SYSTEM, "Idea: volume spikes. Write the alpha.");
    req.grammar = Some(grammar::expression_gbnf());
    req.max_tokens = 40;
    req.temperature = 0.0;
    let a = rec.chat(&req).expect("reply");
    req.messages[0].content = "Idea: gap up at the open. Write the alpha.".into();
    let b = rec.chat(&req).expect("reply");
    // The second prompt shares the system text with the first: its KV entries are reused.
    assert!(b.cached_tokens > 50, "only {} cached tokens of {}", b.cached_tokens, b.prompt_tokens);
    assert_eq!(rec.len(), 2);
    drop(rec);
    // Replay needs no model and gives the recorded replies.
    let rep = CachedModel::<&LocalModel>::open(None, &model().name(), &path, Mode::Replay).expect("replay");
    assert_eq!(rep.chat(&req).expect("replayed").text, b.text);
    req.messages[0].content = "Idea: volume spikes. Write the alpha.".into();
    assert_eq!(rep.chat(&req).expect("replayed").text, a.text);
    req.messages[0].content = "something never asked".into();
    assert!(matches!(rep.chat(&req), Err(LlmError::NotRecorded { .. })));
}
