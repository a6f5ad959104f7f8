//! Prometheus metrics of live nodes (`hub-node --metrics-listen`): served over the node's
//! TLS only to a party of the cluster with a role (a certificate or an operator token),
//! 401 without credentials and 403 for an identity without a role, never data; and the
//! values move with what the cluster does.

use std::time::Duration;

use hub_tests::metrics::{get, sample};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use hub_tls::Identity;

#[test]
fn metrics_are_served_to_the_clusters_parties_only_and_move() {
    let c = Cluster::up(3, "--metrics-listen 127.0.0.1:0");
    let addrs = c.logged_addrs("metrics at /metrics");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let admin = Identity::Operator(hub_tests::tls::ADMIN.into());
    let scrape = |addr: &str| {
        rt.block_on(async {
            let ch = c.channel_as(&admin, addr).await.expect("connect as admin");
            get(ch, addr, None).await
        })
    };

    // Nobody without credentials, and no identity without a role, sees a number.
    let (status, _, body) = rt.block_on(async {
        let ch = c.anonymous_channel(&addrs[0].1).await.expect("connect");
        get(ch, &addrs[0].1, None).await
    });
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("no client certificate or token"), "{body}");
    assert!(!body.contains("hub_raft"), "{body}");
    let agent = Identity::Agent("prod".into());
    let (status, _, body) = rt.block_on(async {
        let ch = c.channel_as(&agent, &addrs[0].1).await.expect("connect");
        get(ch, &addrs[0].1, None).await
    });
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("agent/prod may not read"), "{body}");

    // Exactly one node says it leads, and every node knows the same term.
    let scrapes: Vec<(u64, String)> = poll_until(CONVERGE_TIMEOUT, || {
        let all: Vec<(u64, String)> = addrs
            .iter()
            .map(|(id, a)| {
                let (status, kind, body) = scrape(a);
                assert_eq!(status, 200, "{body}");
                assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
                (*id, body)
            })
            .collect();
        let leaders = all
            .iter()
            .filter(|(_, b)| sample(b, "hub_raft_is_leader") == Some(1.0))
            .count();
        (leaders == 1).then_some(all)
    })
    .expect("one leader in the metrics");
    let (leader_id, before) = scrapes
        .iter()
        .find(|(_, b)| sample(b, "hub_raft_is_leader") == Some(1.0))
        .cloned()
        .expect("the leader");
    let term = sample(&before, "hub_raft_term").expect("term");
    for (_, b) in &scrapes {
        assert_eq!(sample(b, "hub_raft_term"), Some(term), "{b}");
        assert_eq!(sample(b, "hub_raft_leader"), Some(leader_id as f64));
        assert!(
            b.contains("# TYPE hub_raft_proposal_duration_seconds histogram"),
            "{b}"
        );
    }
    let leader_addr = &addrs.iter().find(|(id, _)| *id == leader_id).unwrap().1;
    let applied = |b: &str| sample(b, "hub_raft_applied_index").expect("applied index");
    let proposals =
        |b: &str| sample(b, "hub_raft_proposals_total{outcome=\"applied\"}").unwrap_or(0.0);
    let creates = |b: &str| {
        sample(
            b,
            "hub_api_requests_total{service=\"hub.v1.Hub\",method=\"CreateEnvironment\",code=\"OK\"}",
        )
        .unwrap_or(0.0)
    };

    // Writes through the leader move its proposals, indexes and API counts.
    let leader_node = c.node(leader_id);
    for env in ["prod", "stage", "qa"] {
        c.hubctl_at(&leader_node.addr, &["env", "create", env])
            .expect_ok("env create");
    }
    let (_, _, after) = scrape(leader_addr);
    assert!(proposals(&after) >= proposals(&before) + 3.0, "{after}");
    assert!(applied(&after) >= applied(&before) + 3.0, "{after}");
    assert_eq!(creates(&after), creates(&before) + 3.0, "{after}");
    assert!(
        sample(&after, "hub_raft_apply_lag").is_some(),
        "no apply lag: {after}"
    );
    // The leader reads both followers' clocks on every heartbeat: one machine, so the
    // offsets are near 0 (the round trip's half at most).
    for peer in [1, 2, 3].into_iter().filter(|p| *p != leader_id) {
        let offset = sample(
            &after,
            &format!("hub_raft_peer_clock_offset_milliseconds{{peer=\"{peer}\"}}"),
        )
        .unwrap_or_else(|| panic!("no clock offset of peer {peer}: {after}"));
        assert!(offset.abs() < 1_000.0, "peer {peer}: {offset} ms");
    }
    // Concurrent proposals may reach the log in another order than they were stamped, by
    // milliseconds: the count exists, whatever it is.
    assert!(
        sample(&after, "hub_raft_entry_clock_raised").is_some(),
        "{after}"
    );
    // Refusals are counted by reason: the unauthenticated scrape above, and a gRPC call
    // without credentials.
    let refused =
        |b: &str| sample(b, "hub_api_refused_total{reason=\"authentication\"}").unwrap_or(0.0);
    let anon_before = refused(&after);
    let denied = rt.block_on(async {
        let ch = c
            .anonymous_channel(leader_addr_grpc(&c, leader_id).as_str())
            .await
            .expect("connect");
        hub_proto::hub_client::HubClient::new(ch)
            .list_environments(hub_proto::ListRequest::default())
            .await
    });
    assert_eq!(denied.unwrap_err().code(), tonic::Code::Unauthenticated);
    let (_, _, later) = scrape(leader_addr);
    assert!(refused(&later) > anon_before, "{later}");
    assert!(
        later.contains("hub_api_requests_total{service=\"hub.v1.Hub\",method=\"ListEnvironments\",code=\"Unauthenticated\"}"),
        "{later}"
    );

    // An operator token with a role may scrape too; the leader's orchestrator counts passes.
    let v = c
        .hubctl(&[
            "token",
            "create",
            "--name",
            "prometheus",
            "--role",
            "viewer",
            "-o",
            "json",
        ])
        .expect_ok("token create")
        .json();
    let token = v["secret"].as_str().expect("secret").to_string();
    let (status, _, body) = poll_until(Duration::from_secs(30), || {
        let answer = rt.block_on(async {
            let ch = c.anonymous_channel(leader_addr).await.expect("connect");
            get(ch, leader_addr, Some(&token)).await
        });
        (answer.0 == 200).then_some(answer)
    })
    .expect("the token scrapes");
    assert_eq!(status, 200);
    assert!(
        sample(&body, "hub_orchestrator_evaluations_total").is_some(),
        "{body}"
    );
    assert!(!body.contains(&token["hubtok_".len()..]));
}

/// The gRPC address of node `id`.
fn leader_addr_grpc(c: &Cluster, id: u64) -> String {
    c.node(id).addr
}
