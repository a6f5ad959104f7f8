//! Issue 52, item 1: every real Flagger Canary is accepted. The corpus in
//! `tests/fixtures/flagger/` holds Canary resources copied verbatim from Flagger's repository
//! (each file names its source); every one parses, and what the hub does not act on is
//! reported as ignored with its path and a reason.

use std::fs;
use std::path::PathBuf;

use hub_engine::canary::parse_canary_reporting;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flagger")
}

/// Every fixture, by file name, sorted.
fn corpus() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(corpus_dir())
        .expect("tests/fixtures/flagger exists")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let text = fs::read_to_string(&p).expect("readable fixture");
            (name.to_string(), text)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_flagger_canary_of_the_corpus_is_accepted() {
    let all = corpus();
    assert!(all.len() >= 20, "only {} fixtures", all.len());
    let refused: Vec<String> = all
        .iter()
        .filter_map(|(file, text)| {
            parse_canary_reporting(text)
                .err()
                .map(|e| format!("{file}: {}", e.first()))
        })
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} refused:\n{}",
        refused.len(),
        all.len(),
        refused.join("\n")
    );
}
