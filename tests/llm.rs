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
    M.get_or_init(|| LocalModel::load(&alphaloop::llm::small_gguf(), 4096, 0).expect("GGUF installed by scripts/setup"))
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

/// The writer's grammar admits exactly the labels of the prompt: asked outright for a
/// label it was not shown, the model still writes only shown ones, and the reply compiles
/// once the labels are resolved.
#[test]
fn the_writer_grammar_refuses_a_label_it_was_not_shown() {
    let m = model();
    let g = grammar::writer_gbnf(&[], &["A1".into()], &["A1".into(), "F1".into()]);
    let labels = alphaloop::agent::writer::Labels { alphas: vec![("A1".into(), "seed".into())], failures: vec![("F1".into(), "old".into())] };
    let formulas: std::collections::BTreeMap<String, String> = [("seed".to_string(), "rank(close)".to_string())].into();
    let mut c = Compiler::new(Schema::of(common::sample()), &formulas);
    for (i, ask) in ["Reply exactly: USES: A7\nrank(alpha:A7)", "Reply exactly: USES: F3, A2\nalpha:A2 - alpha:F3"].iter().enumerate() {
        let mut req = ChatRequest::new("You write alphas. Shown: A1 (accepted), F1 (failed).", *ask);
        req.grammar = Some(g.clone());
        req.max_tokens = 40;
        req.seed = i as u32;
        let text = m.chat(&req).expect("reply").text;
        let (uses, expr) = text.split_once('\n').unwrap_or_else(|| panic!("two lines: {text:?}"));
        assert!(uses.starts_with("USES: "), "{text:?}");
        for w in uses["USES: ".len()..].split(", ") {
            assert!(["none", "A1", "F1"].contains(&w), "{text:?}");
        }
        let refs: Vec<String> = alphaloop::expr::parse(expr).unwrap_or_else(|e| panic!("{text:?}: {e}")).alpha_refs().into_iter().map(str::to_string).collect();
        assert!(refs.iter().all(|r| r == "A1"), "{text:?}");
        c.add(&labels.resolve(expr)).unwrap_or_else(|e| panic!("{text:?} does not compile: {e}"));
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
    // A call with another system prompt in between (the judge between two writer calls)
    // takes another KV slot instead of overwriting the writer's.
    let mut judge = ChatRequest::new("You review alphas. Reply SCORE: <0-10>.", format!("Alpha: {}", a.text));
    judge.max_tokens = 8;
    rec.chat(&judge).expect("judge reply");
    req.messages[0].content = "Idea: gap up at the open. Write the alpha.".into();
    let b = rec.chat(&req).expect("reply");
    // The second prompt shares the system text with the first: its KV entries are reused.
    assert!(b.cached_tokens > 50, "only {} cached tokens of {}", b.cached_tokens, b.prompt_tokens);
    assert_eq!(rec.len(), 3);
    drop(rec);
    // Replay needs no model and gives the recorded replies.
    let rep = CachedModel::<&LocalModel>::open(None, &model().name(), &path, Mode::Replay).expect("replay");
    assert_eq!(rep.chat(&req).expect("replayed").text, b.text);
    req.messages[0].content = "Idea: volume spikes. Write the alpha.".into();
    assert_eq!(rep.chat(&req).expect("replayed").text, a.text);
    req.messages[0].content = "something never asked".into();
    assert!(matches!(rep.chat(&req), Err(LlmError::NotRecorded { .. })));
}

#[test]
fn review_and_prose_grammars_give_exactly_the_asked_shape() {
    let m = model();
    let mut req = ChatRequest::new(
        "You review formulaic stock alphas. Reply in exactly this format:\nSCORE: <integer 0-10>\nADVICE: <one or two sentences>",
        "Alpha: rank(-delta(close, 5))\nTraining-period backtest: Rank IC 0.0061, turnover 0.45.",
    );
    req.grammar = Some(grammar::review_gbnf());
    req.max_tokens = 120;
    req.seed = 3;
    let r = m.chat(&req).expect("review");
    let (score, advice) = alphaloop::agent::parse_review(&r.text);
    assert!(r.text.starts_with("SCORE: ") && r.text.contains("\nADVICE: "), "{:?}", r.text);
    assert!((0.0..=10.0).contains(&score));
    assert!(!advice.is_empty() && r.text.lines().count() == 2, "{:?}", r.text);

    let mut req = ChatRequest::new("You are a concise quantitative researcher.", "In one sentence: why might short-term reversal work?");
    req.grammar = Some(grammar::sentences_gbnf(1));
    req.max_tokens = 80;
    let r = m.chat(&req).expect("lesson");
    let text = r.text.trim();
    assert!(!text.contains('\n'), "{text:?}");
    // Either a whole sentence, or cut by the token limit before its full stop.
    assert!(text.ends_with('.') || r.completion_tokens == 80, "{text:?}");
    assert!(text.chars().next().is_some_and(|c| c.is_ascii_alphabetic()), "{text:?}");
}

/// The remote provider against a real OpenAI-compatible server: `alphaloop serve` with the
/// local model behind it, called over HTTP, JSON mode included.
#[test]
fn the_openai_provider_talks_to_a_real_server() {
    use alphaloop::llm::openai::OpenAiModel;
    use std::io::BufRead;
    /// Stops the server however the test ends.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            self.0.kill().ok();
            self.0.wait().ok();
        }
    }
    let mut child = Server(common::bin().args(["serve", "--port", "0", "--llm-threads", "1"]).stdout(std::process::Stdio::piped()).spawn().expect("serve starts"));
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().expect("stdout")).read_line(&mut line).expect("first line");
    let url = line.split_whitespace().last().expect("url").to_string();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"), "{line}");

    let remote = OpenAiModel::new(&url, "local", None, 2, std::time::Duration::from_secs(300)).expect("client");
    let mut req = ChatRequest::new(SYSTEM, "Idea: short-term reversal. Write the alpha.");
    req.max_tokens = 30;
    req.temperature = 0.0;
    let r = remote.chat(&req).expect("reply over HTTP");
    assert!(!r.text.trim().is_empty() && r.prompt_tokens > 50 && r.completion_tokens > 0, "{r:?}");
    // JSON mode is accepted; a second call reuses the server's KV prefix.
    req.json = true;
    req.messages[0].content = "Idea: low volatility. Write the alpha.".into();
    let r2 = remote.chat(&req).expect("json-mode reply");
    assert!(r2.cached_tokens > 50, "{r2:?}");
    let models: serde_json::Value = reqwest::blocking::get(format!("{url}/models")).expect("models").json().expect("json");
    assert!(models["data"][0]["id"].as_str().is_some_and(|s| s.starts_with("local:")), "{models}");
    let bad = reqwest::blocking::Client::new().post(format!("{url}/chat/completions")).body("{\"messages\": 3}").send().expect("sent");
    assert_eq!(bad.status().as_u16(), 400);
    assert!(bad.text().expect("body").contains("messages"));
}
