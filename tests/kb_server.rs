//! The shared backend against a real Qdrant server. Runs when `QDRANT_URL` is set (e.g.
//! `QDRANT_URL=qdrant://localhost:6334`); otherwise it says it was skipped.

use alphaloop::kb::{AlphaRecord, Filter, Kb, Kind, Location, Status};

#[test]
fn server_backend_round_trip() {
    let Ok(url) = std::env::var("QDRANT_URL") else {
        eprintln!("SKIPPED: set QDRANT_URL=qdrant://host:6334 to test the Qdrant server backend");
        return;
    };
    let base = url.trim_end_matches('/').split('/').take(3).collect::<Vec<_>>().join("/");
    let coll = format!("alphaloop_test_{}_{}", std::process::id(), alphaloop::kb::record::now());
    let loc: Location = format!("{base}/{coll}").parse().expect("location");
    let kb = Kb::open(&loc, alphaloop::kb::default_embedder(None).expect("model")).expect("connects");
    let mut a = AlphaRecord::new("s1", Kind::Expression, "rank(close)", Status::Accepted);
    a.idea = "cross-sectional price level".into();
    let b = AlphaRecord::new("s2", Kind::Expression, "rank(volume)", Status::Rejected { reason: "dup".into() });
    kb.put(vec![(a.clone(), Some(vec![0.5; alphaloop::kb::behaviour::DIM])), (b, None)]).expect("put");
    let got = kb.get("s1").expect("get").expect("present");
    assert_eq!(got.code, a.code);
    assert_eq!(kb.count(&Filter::new().is("status", "accepted")).expect("count"), 1);
    let hits = kb.search_text("price level", &Filter::new(), 1, false).expect("search");
    assert_eq!(hits[0].record.id, "s1");
    assert!(kb.remove("s2").expect("rm"));
    assert_eq!(kb.count(&Filter::new()).expect("count"), 1);
}
