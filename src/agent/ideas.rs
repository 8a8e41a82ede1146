//! The idea library (`alpha_kb/ideas.toml`) and the outer loop's bandit over families.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use super::{distinct_sentences, f4, AgentError, Miner, Outcome};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Idea {
    pub id: String,
    pub family: String,
    /// The idea written as a testable hypothesis.
    pub hypothesis: String,
    /// The accepted alphas an action's idea starts from (refine one, combine two).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

/// Cosine similarity (of the KB's text embeddings) above which a generated hypothesis counts
/// as a paraphrase of an existing one. Paraphrases score about 0.9 and above with MiniLM,
/// different ideas of one family about 0.5–0.8.
pub const MAX_IDEA_SIMILARITY: f32 = 0.9;

/// The hypothesis in an LLM's reply to `templates/new_idea.md` (`HYPOTHESIS: ...`), if it
/// gave a usable one.
pub fn parse_hypothesis(reply: &str) -> Option<String> {
    let line = reply.lines().map(str::trim).find(|l| l.to_ascii_uppercase().starts_with("HYPOTHESIS"))?;
    let text = line.split_once(':').map(|(_, t)| t).unwrap_or("").trim().trim_matches('"').trim();
    (text.split_whitespace().count() >= 6).then(|| text.to_string())
}

#[derive(Deserialize)]
struct IdeaFile {
    idea: Vec<Idea>,
}

pub fn load(path: &Path) -> Result<Vec<Idea>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("idea file {}: {e}", path.display()))?;
    let f: IdeaFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut seen = std::collections::HashSet::new();
    for (i, idea) in f.idea.iter().enumerate() {
        if idea.id.is_empty() || idea.family.is_empty() || idea.hypothesis.is_empty() {
            return Err(format!("{}: idea #{} needs id, family and hypothesis", path.display(), i + 1));
        }
        if !seen.insert(idea.id.clone()) {
            return Err(format!("{}: duplicate idea id '{}'", path.display(), idea.id));
        }
    }
    Ok(f.idea)
}

/// UCB1 over the idea families and the actions ([`super::evolve::ACTIONS`]), each rewarded
/// by what its ideas added to the accepted set's combination ([`super::evolve::reward`]).
/// Arms never tried come first (the families in library order, then the actions, each when
/// it has what it needs); within a family, ideas are taken in turn.
#[derive(Clone)]
pub struct Bandit {
    families: Vec<String>,
    by_family: BTreeMap<String, Vec<Idea>>,
    next: BTreeMap<String, usize>,
    plays: BTreeMap<String, (f64, f64)>,
}

/// What the bandit chose: an idea of a family, or an action (its idea made by the miner).
#[derive(Clone, Debug, PartialEq)]
pub enum Arm {
    Idea(Idea),
    Action(String),
}

impl Bandit {
    pub fn new(ideas: &[Idea]) -> Bandit {
        let mut families = Vec::new();
        let mut by_family: BTreeMap<String, Vec<Idea>> = BTreeMap::new();
        for i in ideas {
            if !by_family.contains_key(&i.family) {
                families.push(i.family.clone());
            }
            by_family.entry(i.family.clone()).or_default().push(i.clone());
        }
        Bandit { families, by_family, next: BTreeMap::new(), plays: BTreeMap::new() }
    }

    /// Records an outcome (also used to replay a resumed run's history).
    pub fn update(&mut self, family: &str, reward: f64) {
        let e = self.plays.entry(family.to_string()).or_insert((0.0, 0.0));
        e.0 += 1.0;
        e.1 += reward;
    }

    /// Marks an idea as used so it is not proposed again before the family wraps round.
    pub fn skip(&mut self, family: &str) {
        *self.next.entry(family.to_string()).or_insert(0) += 1;
    }

    /// Adds a new idea (e.g. one the LLM generated) so it is the next one its family gives.
    pub fn add(&mut self, idea: Idea) {
        if !self.by_family.contains_key(&idea.family) {
            self.families.push(idea.family.clone());
        }
        let list = self.by_family.entry(idea.family.clone()).or_default();
        let k = self.next.get(&idea.family).copied().unwrap_or(0);
        let at = if list.is_empty() { 0 } else { k % list.len() };
        list.insert(at, idea);
    }

    /// The families, in library order.
    pub fn families(&self) -> &[String] {
        &self.families
    }

    /// The ideas of one family.
    pub fn ideas(&self, family: &str) -> &[Idea] {
        self.by_family.get(family).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The next idea to mine, from the families only.
    pub fn pick(&mut self) -> Option<Idea> {
        match self.pick_arm(|_| false)? {
            Arm::Idea(i) => Some(i),
            Arm::Action(_) => None,
        }
    }

    /// The next arm: an idea of a family, or an action that `available` allows.
    pub fn pick_arm(&mut self, available: impl Fn(&str) -> bool) -> Option<Arm> {
        let total: f64 = self.plays.values().map(|p| p.0).sum::<f64>().max(1.0);
        let util = |f: &str| match self.plays.get(f) {
            None => f64::INFINITY,
            Some((n, r)) => r / n + (2.0 * total.ln() / n).sqrt(),
        };
        // Highest utility; ties go to the arm listed first.
        let actions = super::evolve::ACTIONS.iter().copied().filter(|a| available(a));
        let mut arm: Option<&str> = None;
        for f in self.families.iter().map(String::as_str).chain(actions) {
            if arm.is_none_or(|b| util(f) > util(b)) {
                arm = Some(f);
            }
        }
        let arm = arm?.to_string();
        if super::evolve::ACTIONS.contains(&arm.as_str()) {
            return Some(Arm::Action(arm));
        }
        let list = self.by_family.get(&arm)?;
        let k = self.next.entry(arm.clone()).or_insert(0);
        let idea = list[*k % list.len()].clone();
        *k += 1;
        Some(Arm::Idea(idea))
    }
}

impl Miner<'_> {
    /// FinAgent's high-level reflection: after a generation of ideas, the LLM reads their
    /// outcomes (train and valid only) and writes what the generation teaches; the summary
    /// goes into the KB as a lesson, which later writers retrieve. Returns it with the
    /// tokens it used.
    pub fn summarize_generation(&self, generation: u32, outcomes: &[Outcome]) -> Result<(crate::kb::Lesson, (u64, u64)), AgentError> {
        let rows: Vec<minijinja::Value> = outcomes
            .iter()
            .map(|o| {
                minijinja::context! {
                    family => o.family.clone(), code => o.code.clone(), status => o.status.clone(),
                    train => o.train_rank_ic.map(f4).unwrap_or_else(|| "n/a".into()),
                    valid => o.valid_rank_ic.map(f4).unwrap_or_else(|| "n/a".into()),
                }
            })
            .collect();
        let user = self.templates.render("generation_summary.md", minijinja::context! { generation => generation, outcomes => rows })?;
        let mut tokens = (0, 0);
        let text = self.ask(&self.templates.render("reflect_system.md", minijinja::context! {})?, user, self.grammars.as_ref().map(|g| &g.summary), 160, 7_000 + generation, &mut tokens)?;
        let lesson = crate::kb::Lesson {
            id: format!("{}-gen{generation}", self.run_id),
            text: format!("Generation {generation} summary: {}", distinct_sentences(&text, 3)),
            run_id: self.run_id.clone(),
            generation,
            sources: outcomes.iter().map(|o| o.record_id.clone()).collect(),
            created_at: crate::kb::record::now(),
        };
        self.kb.put_lesson(&lesson)?;
        Ok((lesson, tokens))
    }
}

impl Miner<'_> {
    /// A new idea from the LLM for the family the KB is thinnest in (fewest accepted alphas,
    /// then fewest attempts), shown the family's existing hypotheses and the latest
    /// generation summary so it proposes something different. `None` if neither of two
    /// replies held a usable hypothesis that is not a paraphrase of an existing one (cosine
    /// similarity of their embeddings above [`MAX_IDEA_SIMILARITY`]). Returns the
    /// tokens used.
    pub fn generate_idea(&self, bandit: &Bandit, seq: usize, summary: &str) -> Result<(Option<Idea>, (u64, u64)), AgentError> {
        let mut gap: Option<(usize, usize, &String)> = None;
        for f in bandit.families() {
            let fam = crate::kb::Filter::new().is("family", f.as_str());
            let accepted = self.kb.count(&fam.clone().is("status", "accepted"))?;
            let tried = self.kb.count(&fam)?;
            if gap.is_none_or(|(a, t, _)| (accepted, tried) < (a, t)) {
                gap = Some((accepted, tried, f));
            }
        }
        let Some((accepted, tried, family)) = gap else { return Ok((None, (0, 0))) };
        let existing: Vec<String> = bandit.ideas(family).iter().map(|i| i.hypothesis.clone()).collect();
        let user = self.templates.render(
            "new_idea.md",
            minijinja::context! { family => family.clone(), accepted => accepted, tried => tried, existing => existing, summary => summary, extra_fields => self.cfg.extra_fields },
        )?;
        let system = self.templates.render("idea_system.md", minijinja::context! {})?;
        let mut tokens = (0, 0);
        // A paraphrase of a hypothesis already in the library would be mined twice: such a
        // reply gets one more try with another seed, then the generation adds no idea.
        for attempt in 0..2u32 {
            let reply = self.ask(&system, user.clone(), self.grammars.as_ref().map(|g| &g.hypothesis), 90, 9_000 + seq as u32 + attempt * 100_003, &mut tokens)?;
            let Some(h) = parse_hypothesis(&reply) else { continue };
            let mut texts = vec![h.clone()];
            texts.extend(existing.iter().cloned());
            let v = self.kb.embedder().embed(&texts)?;
            let closest = v[1..].iter().map(|e| e.iter().zip(&v[0]).map(|(a, b)| a * b).sum::<f32>()).fold(f32::NAN, f32::max);
            if closest > MAX_IDEA_SIMILARITY {
                tracing::info!(family = %family, similarity = closest, "generated idea repeats an existing hypothesis: {h}");
                continue;
            }
            return Ok((Some(Idea { id: format!("{}-idea{seq:04}", self.run_id), family: family.clone(), hypothesis: h, parents: Vec::new() }), tokens));
        }
        Ok((None, tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_library_has_100_distinct_ideas_in_many_families() {
        let ideas = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("alpha_kb/ideas.toml")).expect("loads");
        assert!(ideas.len() >= 100);
        let fams: std::collections::HashSet<_> = ideas.iter().map(|i| i.family.as_str()).collect();
        assert!(fams.len() >= 8);
        let texts: std::collections::HashSet<_> = ideas.iter().map(|i| i.hypothesis.as_str()).collect();
        assert_eq!(texts.len(), ideas.len());
    }

    #[test]
    fn bandit_tries_every_family_then_favours_rewarded_ones() {
        let ideas: Vec<Idea> = ["a", "b", "c"]
            .iter()
            .flat_map(|f| (0..3).map(move |i| Idea { id: format!("{f}{i}"), family: f.to_string(), hypothesis: format!("{f} {i}"), parents: Vec::new() }))
            .collect();
        let mut b = Bandit::new(&ideas);
        let first: Vec<String> = (0..3)
            .map(|_| {
                let f = b.pick().expect("idea").family;
                b.update(&f, 0.0);
                f
            })
            .collect();
        assert_eq!(first, vec!["a", "b", "c"]);
        for _ in 0..20 {
            b.update("b", 1.0);
            b.update("a", 0.0);
            b.update("c", 0.0);
        }
        assert_eq!(b.pick().expect("idea").family, "b");
    }

    #[test]
    fn actions_join_when_they_can_and_compete_by_reward() {
        let ideas: Vec<Idea> = ["a", "b"].iter().map(|f| idea(&format!("{f}0"), f)).collect();
        let mut b = Bandit::new(&ideas);
        let arm = |b: &mut Bandit, can: bool| match b.pick_arm(|a| can && a == crate::agent::evolve::REFINE).expect("an arm") {
            Arm::Idea(i) => i.family,
            Arm::Action(a) => a,
        };
        assert_eq!(arm(&mut b, true), "a");
        b.update("a", 0.0);
        // Refine cannot run yet (no accepted alpha): the families go on.
        assert_eq!(arm(&mut b, false), "b");
        b.update("b", 0.0);
        assert_eq!(arm(&mut b, true), "refine", "an untried action once it can run");
        for _ in 0..20 {
            b.update("refine", 0.8);
            b.update("a", 0.0);
            b.update("b", 0.1);
        }
        assert_eq!(arm(&mut b, true), "refine");
        assert_eq!(arm(&mut b, false), "b", "the best family when the action cannot run");
    }

    fn idea(id: &str, family: &str) -> Idea {
        Idea { id: id.into(), family: family.into(), hypothesis: format!("hypothesis {id}"), parents: Vec::new() }
    }

    #[test]
    fn hypotheses_are_parsed_from_replies() {
        assert_eq!(
            parse_hypothesis("Sure.\nHYPOTHESIS: Stocks whose volume spikes on down days rebound over the next week.").as_deref(),
            Some("Stocks whose volume spikes on down days rebound over the next week.")
        );
        assert_eq!(parse_hypothesis("Hypothesis: \"Gaps up on low volume fade within days.\"").as_deref(), Some("Gaps up on low volume fade within days."));
        assert_eq!(parse_hypothesis("HYPOTHESIS: too short"), None);
        assert_eq!(parse_hypothesis("no hypothesis here at all, just words"), None);
    }

    #[test]
    fn an_added_idea_is_its_familys_next() {
        let mut b = Bandit::new(&[idea("m1", "momentum"), idea("m2", "momentum"), idea("r1", "reversal")]);
        assert_eq!(b.pick().map(|i| i.id), Some("m1".into()));
        b.update("momentum", 1.0);
        b.add(idea("gen", "momentum"));
        assert_eq!(b.pick().map(|i| i.id), Some("r1".into()), "untried family first");
        b.update("reversal", 0.0);
        assert_eq!(b.pick().map(|i| i.id), Some("gen".into()));
        b.add(idea("v1", "volatility"));
        assert!(b.families().contains(&"volatility".to_string()));
    }
}
