//! Parse budgets (issue 51, item 2), on a real 3-node cluster: a viewer's `module_dry_run`
//! query and a module editor's `PublishModule` with an alias bomb in a module's
//! `configOverrides`, a product editor's release manifest nested 100,000 deep, and a viewer's
//! 8 MiB of command JSON that serde_json would read into 100 MiB of strings. Each is
//! refused quickly with the limit it passed, and: no node's peak memory jumps, all three nodes
//! stay up, the leader and its term stay (no election), a write commits while the document is
//! refused and after it, and the nodes' digests agree.
//!
//! The bomb is small (10 KB, 4 million values once expanded) so that the code before the
//! budget failed in seconds, not minutes: its query took the leader's peak memory up by
//! hundreds of MiB.

use std::time::{Duration, Instant};

use hub_proto::hub_client::HubClient;
use hub_proto::SubmitRequest;
use hub_tests::{run_with_limit, Cluster, CmdOutput, CONVERGE_TIMEOUT, HUBCTL_LIMIT};
use hub_tls::Identity;

/// How long a refusal may take (a debug build on a loaded 2-core machine; it takes well under a
/// second).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// How long a write may take while a document is refused.
const WRITE_WITHIN: Duration = Duration::from_secs(10);

/// How much any node's peak resident memory may grow while a document is refused.
const PEAK_GROWTH: u64 = 64 << 20;

/// The words of the alias budget's refusal.
const ALIASES: &str = "values once aliases are expanded";

/// A module definition (file `budget-module.yml`) whose `configOverrides` names one anchor of
/// 2,000 items 2,000 times: 4 million values from 10 KB.
fn bomb_definition() -> String {
    let n = 2_000;
    format!(
        "name: budget-module\nentities:\n  - type: helmChart\n    helmChart:\n      \
         productId: com.example:web\n      k8sNamespace: web\n      configOverrides: |\n        \
         \"1.0.0\":\n          overrides:\n            a: &a [{}]\n            b: [{}]\n",
        vec!["x"; n].join(","),
        vec!["*a"; n].join(",")
    )
}

/// A release manifest whose product name is a sequence nested 100,000 deep.
fn deep_manifest() -> String {
    format!(
        "manifest-version: \"1.0\"\nproduct-group: com.example\nproduct-name: {}\n",
        "[".repeat(100_000)
    )
}

/// `hubctl --endpoints ADDR ARGS` as `identity`: its output, or its failure.
fn hubctl_as_at(
    c: &Cluster,
    identity: &Identity,
    addr: &str,
    args: &[&str],
) -> Result<String, String> {
    let f = c.tls_files(identity);
    let mut cmd = std::process::Command::new(hub_tests::hubctl_bin());
    cmd.env("HUBCTL_CA_FILE", &f.ca)
        .env("HUBCTL_CERT_FILE", &f.cert)
        .env("HUBCTL_KEY_FILE", &f.key)
        .args(["--endpoints", addr])
        .args(args);
    let out: CmdOutput = run_with_limit(&mut cmd, HUBCTL_LIMIT);
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(out.describe())
    }
}

/// 8 MiB of command JSON that serde_json reads into 2.8 million strings (about 100 MiB),
/// submitted to `addr` as `identity`: the answer, or the refusal.
fn submit_json_bomb(c: &Cluster, identity: &Identity, addr: &str) -> Result<String, String> {
    let n = (8 << 20) / 3;
    let json = format!(
        "{{\"Evaluate\":{{\"entities\":[{}],\"artifacts\":[]}}}}",
        vec!["\"\""; n].join(",")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        let channel = c
            .connector(identity)
            .channel(addr, |e| e.timeout(ANSWER_WITHIN))
            .await
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        HubClient::new(channel)
            .max_encoding_message_size(16 << 20)
            .submit(SubmitRequest {
                command_json: json,
                request_id: String::new(),
            })
            .await
            .map(|r| format!("{:?}", r.into_inner()))
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    })
}

/// The peak resident memory (`VmHWM`) of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"));
    kib << 10
}

/// `(leader, term)` once a leader is confirmed.
fn leader_and_term(c: &Cluster) -> (u64, u64) {
    let leader = c.leader_id();
    let status = c.status().expect("cluster status");
    (leader, status["term"].as_u64().expect("term"))
}

/// Creates environment `name` through `addr`: how long it took, or why it failed.
fn write(c: &Cluster, addr: &str, name: &str) -> Result<Duration, String> {
    let started = Instant::now();
    let out = c.hubctl_at(addr, &["env", "create", name]);
    if out.success() {
        Ok(started.elapsed())
    } else {
        Err(format!("create environment {name}: {}", out.describe()))
    }
}

/// Whether a write through `addr` commits within [`WRITE_WITHIN`].
fn write_commits(c: &Cluster, addr: &str, name: &str) -> Option<String> {
    match write(c, addr, name) {
        Ok(took) if took <= WRITE_WITHIN => None,
        Ok(took) => Some(format!("a write took {took:?}")),
        Err(e) => Some(e),
    }
}

/// Runs `hostile` (a call that must be refused with `want`) while a write goes through
/// `write_addr`, then checks that nothing suffered: answer time, peak memory, nodes alive,
/// leader and term, a write after, digests. Returns what went wrong.
fn refused_harmlessly(
    c: &Cluster,
    what: &str,
    write_addr: &str,
    want: &str,
    hostile: impl FnOnce() -> Result<String, String> + Send,
) -> Vec<String> {
    let before = leader_and_term(c);
    let peaks: Vec<(u64, u32, u64)> = c
        .nodes()
        .iter()
        .map(|n| (n.id, n.pid, peak_rss(n.pid)))
        .collect();
    let (out, took, during) = std::thread::scope(|s| {
        let refused = s.spawn(|| {
            let started = Instant::now();
            let out = hostile();
            (out, started.elapsed())
        });
        let during = write_commits(c, write_addr, &format!("during-{what}"));
        let (out, took) = refused.join().expect("the hostile call");
        (out, took, during)
    });
    let mut problems = Vec::from_iter(during);
    match out {
        Err(refusal) if refusal.contains(want) => {}
        Err(refusal) => problems.push(format!("not refused with {want:?}: {refusal:.2000}")),
        Ok(answer) => problems.push(format!("accepted: {answer:.2000}")),
    }
    if took > ANSWER_WITHIN {
        problems.push(format!("refused after {took:?}"));
    }
    let mut growth = Vec::new();
    for (id, pid, peak) in peaks {
        if !c.is_running(id) {
            problems.push(format!("node {id} is gone\n{}", c.log_tails(20)));
            continue;
        }
        let grew = peak_rss(pid).saturating_sub(peak);
        growth.push(format!("node {id} +{} KiB", grew >> 10));
        if grew > PEAK_GROWTH {
            problems.push(format!(
                "node {id}'s peak memory grew by {} MiB",
                grew >> 20
            ));
        }
    }
    eprintln!(
        "{what}: refused in {took:?}; peak memory {}",
        growth.join(", ")
    );
    let after = leader_and_term(c);
    if after != before {
        problems.push(format!(
            "an election: (leader, term) {before:?} became {after:?}"
        ));
    }
    problems.extend(write_commits(c, &c.endpoints(), &format!("after-{what}")));
    c.wait_converged(CONVERGE_TIMEOUT);
    problems
        .into_iter()
        .map(|p| format!("{what}: {p}"))
        .collect()
}

#[test]
fn hostile_documents_are_refused_within_their_budget() {
    let c = Cluster::up(3, "");
    let dir = tempfile::tempdir().expect("tempdir");
    let (viewer, module_editor, product_editor) = (
        Identity::Operator("vic".into()),
        Identity::Operator("mo".into()),
        Identity::Operator("pat".into()),
    );
    for binding in [
        &["operator/vic", "viewer"][..],
        &["operator/mo", "module-editor"],
        &["operator/pat", "product-editor", "--product", "*"],
    ] {
        let mut args = vec!["role", "bind"];
        args.extend_from_slice(binding);
        c.hubctl(&args).expect_ok(&format!("bind {}", binding[0]));
    }
    let bomb = dir.path().join("budget-module.yml");
    std::fs::write(&bomb, bomb_definition()).expect("write the definition");
    let bomb = bomb.to_str().expect("utf-8 path");
    let manifest = dir.path().join("manifest.yml");
    std::fs::write(&manifest, deep_manifest()).expect("write the manifest");
    let manifest = manifest.to_str().expect("utf-8 path");
    let leader = c.node(c.leader_id());
    let follower = c
        .nodes()
        .into_iter()
        .find(|n| n.id != leader.id)
        .expect("a follower");
    // A viewer's query at the leader, a write through a follower meanwhile.
    let mut problems = refused_harmlessly(&c, "dry-run", &follower.addr, ALIASES, || {
        hubctl_as_at(
            &c,
            &viewer,
            &leader.addr,
            &[
                "module",
                "create",
                "--module-definition-file",
                bomb,
                "--dry-run",
            ],
        )
    });
    // A module editor's publish is applied (and refused) on every node.
    problems.extend(refused_harmlessly(
        &c,
        "publish",
        &follower.addr,
        ALIASES,
        || {
            hubctl_as_at(
                &c,
                &module_editor,
                &leader.addr,
                &["module", "create", "--module-definition-file", bomb],
            )
        },
    ));
    let nesting = "nesting deeper than 128";
    problems.extend(refused_harmlessly(
        &c,
        "manifest",
        &follower.addr,
        nesting,
        || {
            hubctl_as_at(
                &c,
                &product_editor,
                &leader.addr,
                &["release", "publish", "--file", manifest],
            )
        },
    ));
    // Command JSON is refused before serde_json reads it.
    let too_long = "at most 1048576 allowed";
    problems.extend(refused_harmlessly(
        &c,
        "command-json",
        &follower.addr,
        too_long,
        || submit_json_bomb(&c, &viewer, &leader.addr),
    ));
    // Nothing was published.
    let modules = c
        .hubctl(&["module", "list", "-o", "json"])
        .expect_ok("module list");
    if modules.stdout.contains("budget-module") {
        problems.push(format!("the module was published: {}", modules.stdout));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
