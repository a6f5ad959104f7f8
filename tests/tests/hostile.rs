//! Hostile input from the network (SPEC S3, issue 14): a node never panics or aborts on bytes
//! a peer or a client sends. The length bomb of issue 14 — a value whose first string declares
//! 2^45 bytes, 11 bytes in all — goes to every node through `Hub.Forward`, `Raft.AppendEntries`,
//! `Raft.Vote` and `Raft.InstallSnapshot`; each call gets a clear error code, every node stays up
//! with its state unchanged, and the cluster still commits writes afterwards. The snapshot
//! intake also refuses a declared size above its limit and a second concurrent stream.

use hub_tls::Identity;
use std::time::{Duration, Instant};

use hub_proto::agent_client::AgentClient;
use hub_proto::hub_client::HubClient;
use hub_proto::raft_client::RaftClient;
use hub_proto::{FetchPlansRequest, ForwardRequest, RaftRequest, SnapshotChunk};
use hub_tests::{Cluster, CONVERGE_TIMEOUT};
use openraft::raft::AppendEntriesRequest;
use openraft::vote::RaftLeaderId;
use raft_store::codec;
use raft_store::TypeConfig;
use tonic::transport::Channel;
use tonic::Code;

/// A name the bombs are cut at.
const MARK: &str = "hostile-length-bomb-marker";

/// `encoded` cut where the string [`MARK`] starts, its length prefix replaced by bincode's
/// varint for 2^45 (0xfd and 8 bytes little-endian): decoded without a bound, that string
/// allocates 32 TiB before the decoder notices the input ended.
fn bomb_at_mark(encoded: &[u8]) -> Vec<u8> {
    let at = encoded
        .windows(MARK.len())
        .position(|w| w == MARK.as_bytes())
        .expect("the marker is encoded");
    assert_eq!(usize::from(encoded[at - 1]), MARK.len(), "a 1-byte length");
    let mut bomb = encoded[..at - 1].to_vec();
    bomb.push(0xfd);
    bomb.extend_from_slice(&(1u64 << 45).to_le_bytes());
    bomb
}

fn create_env_named_mark() -> hub_engine::Command {
    hub_engine::Command::CreateEnvironment {
        name: MARK.into(),
        description: String::new(),
    }
}

/// Issue 14's 11 bytes: a forwarded write (format byte, variant 0 = CreateEnvironment) whose
/// name declares 2^45 bytes.
fn forward_bomb() -> Vec<u8> {
    let bomb = bomb_at_mark(&codec::encode(&(create_env_named_mark(), None::<String>)));
    assert_eq!(bomb.len(), 11);
    bomb
}

fn vote() -> raft_store::Vote {
    raft_store::Vote::new(1, 1)
}

/// An AppendEntries whose one entry's command name declares 2^45 bytes.
fn append_entries_bomb() -> Vec<u8> {
    let entry: raft_store::Entry = openraft::Entry {
        log_id: openraft::LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            1,
        ),
        payload: openraft::EntryPayload::Normal(hub_engine::Request {
            command: create_env_named_mark(),
            time_ms: 0,
            request_id: None,
        }),
    };
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote: vote(),
        prev_log_id: None,
        entries: vec![entry],
        leader_commit: None,
    };
    bomb_at_mark(&codec::encode(&rpc))
}

/// A snapshot header `(vote, meta)` naming a member at `addr`.
fn snapshot_header(addr: &str) -> Vec<u8> {
    let members = std::collections::BTreeMap::from([(1u64, openraft::BasicNode::new(addr))]);
    let membership = openraft::Membership::new(vec![[1u64].into()], members).expect("membership");
    let meta = raft_store::SnapshotMeta {
        last_log_id: None,
        last_membership: raft_store::StoredMembership::new(None, membership),
    };
    codec::encode(&(vote(), meta))
}

/// A raw channel to one node as `identity` (mutual TLS with a certificate from the cluster's
/// CA): the only place that knows how the test reaches a node.
async fn connect(cluster: &Cluster, identity: &Identity, addr: &str) -> Channel {
    cluster
        .connector(identity)
        .channel(addr, |e| {
            e.connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(30))
        })
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[track_caller]
fn expect_code<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>, code: Code) {
    match r {
        Err(s) if s.code() == code => {}
        other => panic!("{what}: expected {code:?}, got {other:?}"),
    }
}

/// The digest of every node's own state (`digest --stale` at each node).
fn digests(cluster: &Cluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|n| {
            cluster
                .digest_at(&n.addr)
                .unwrap_or_else(|| panic!("node {} does not answer", n.id))
                .1
        })
        .collect()
}

async fn install(
    raft: &mut RaftClient<Channel>,
    chunks: Vec<SnapshotChunk>,
) -> Result<tonic::Response<hub_proto::RaftReply>, tonic::Status> {
    raft.install_snapshot(tokio_stream::iter(chunks)).await
}

#[test]
fn the_length_bomb_and_hostile_snapshots_get_errors_and_every_node_stays_up() {
    let cluster = Cluster::up(3, "");
    cluster
        .create_env(0, "before")
        .expect_ok("create an environment");
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let before = digests(&cluster);
    assert!(before.windows(2).all(|w| w[0] == w[1]), "{before:?}");
    let cluster_id = cluster.cluster_id.clone();
    let forward = forward_bomb();
    let append = append_entries_bomb();
    let header = bomb_at_mark(&snapshot_header(MARK));

    let rt = runtime();
    for node in cluster.nodes() {
        rt.block_on(async {
            // A member node's own certificate: the bombs reach the decoders.
            let channel = connect(&cluster, &Identity::Node(1), &node.addr).await;
            let started = Instant::now();
            let mut hub = HubClient::new(channel.clone());
            let r = hub
                .forward(ForwardRequest {
                    cluster_id: cluster_id.clone(),
                    command: forward.clone(),
                })
                .await;
            expect_code("Hub.Forward", r, Code::InvalidArgument);
            // Without node credentials the bomb never reaches a decoder.
            let operator = connect(&cluster, &Identity::Operator("admin".into()), &node.addr).await;
            let r = HubClient::new(operator.clone())
                .forward(ForwardRequest {
                    cluster_id: cluster_id.clone(),
                    command: forward.clone(),
                })
                .await;
            expect_code("Hub.Forward as an operator", r, Code::PermissionDenied);
            let r = RaftClient::new(operator.clone())
                .append_entries(RaftRequest {
                    cluster_id: cluster_id.clone(),
                    payload: append.clone(),
                })
                .await;
            expect_code(
                "Raft.AppendEntries as an operator",
                r,
                Code::PermissionDenied,
            );
            let r = RaftClient::new(operator)
                .stream_append(tokio_stream::iter(vec![RaftRequest {
                    cluster_id: cluster_id.clone(),
                    payload: append.clone(),
                }]))
                .await;
            expect_code(
                "Raft.StreamAppend as an operator",
                r,
                Code::PermissionDenied,
            );

            let mut raft = RaftClient::new(channel.clone());
            let request = |payload: &Vec<u8>| RaftRequest {
                cluster_id: cluster_id.clone(),
                payload: payload.clone(),
            };
            expect_code(
                "Raft.AppendEntries",
                raft.append_entries(request(&append)).await,
                Code::InvalidArgument,
            );
            // On the replication stream the bomb ends the stream with the same error.
            let mut replies = raft
                .stream_append(tokio_stream::iter(vec![request(&append)]))
                .await
                .expect("Raft.StreamAppend opens")
                .into_inner();
            expect_code(
                "Raft.StreamAppend",
                replies.message().await,
                Code::InvalidArgument,
            );
            // Another cluster's request is refused before Raft sees it, and ends the stream.
            let mut replies = raft
                .stream_append(tokio_stream::iter(vec![RaftRequest {
                    cluster_id: "another-cluster".into(),
                    payload: append.clone(),
                }]))
                .await
                .expect("Raft.StreamAppend opens")
                .into_inner();
            let refused = replies.message().await.expect("a reply").expect("a reply");
            assert!(
                refused.refused.contains("another-cluster") && refused.payload.is_empty(),
                "{refused:?}"
            );
            assert!(replies.message().await.expect("the end").is_none());
            // A vote is a few integers: the forwarded bomb is simply not one.
            expect_code(
                "Raft.Vote",
                raft.vote(request(&forward)).await,
                Code::InvalidArgument,
            );

            let chunk = |header: Vec<u8>, total_bytes: u64| SnapshotChunk {
                cluster_id: cluster_id.clone(),
                header,
                data: b"x".to_vec(),
                total_bytes,
            };
            expect_code(
                "Raft.InstallSnapshot (bomb header)",
                install(&mut raft, vec![chunk(header.clone(), 0)]).await,
                Code::InvalidArgument,
            );
            expect_code(
                "Raft.InstallSnapshot (declared 2^45 bytes)",
                install(
                    &mut raft,
                    vec![chunk(snapshot_header("127.0.0.1:1"), 1 << 45)],
                )
                .await,
                Code::ResourceExhausted,
            );
            // Every call was answered at once, not after an allocation or a timeout.
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{:?}",
                started.elapsed()
            );

            // The agent API refuses an environment that does not exist, without waiting (asked
            // by that environment's agent: any other is refused before the lookup).
            let agent_channel =
                connect(&cluster, &Identity::Agent("no-such-env".into()), &node.addr).await;
            let mut agent = AgentClient::new(agent_channel);
            let r = agent
                .fetch_plans(FetchPlansRequest {
                    environment: "no-such-env".into(),
                    wait_ms: 10_000,
                    ..Default::default()
                })
                .await;
            expect_code("Agent.FetchPlans", r, Code::NotFound);
            // Known plan ids beyond their bounds are refused, naming the field.
            for (what, ids, field) in [
                (
                    "1,025 ids",
                    vec!["p-1-0".to_string(); 1_025],
                    "known_plan_ids:",
                ),
                ("a 129-byte id", vec!["p".repeat(129)], "known_plan_ids[0]:"),
            ] {
                let r = agent
                    .fetch_plans(FetchPlansRequest {
                        environment: "no-such-env".into(),
                        wait_ms: 10_000,
                        known_plan_ids: ids,
                        ..Default::default()
                    })
                    .await;
                match r {
                    Err(s) if s.code() == Code::InvalidArgument => {
                        assert!(s.message().starts_with(field), "{what}: {s:?}")
                    }
                    other => panic!("Agent.FetchPlans with {what}: {other:?}"),
                }
            }
        });
        assert!(cluster.is_running(node.id), "node {} died", node.id);
    }

    // One snapshot stream at a time: a stream that declared 1000 bytes and sent 1 holds the
    // node's slot, and another one is refused until it ends.
    let target = cluster.nodes()[0].clone();
    rt.block_on(async {
        let channel = connect(&cluster, &Identity::Node(1), &target.addr).await;
        let mut raft = RaftClient::new(channel.clone());
        let deadline = Instant::now() + Duration::from_secs(20);
        let (tx, held) = 'held: loop {
            let (tx, held) = hold_snapshot_slot(&channel, &cluster_id).await;
            loop {
                assert!(
                    Instant::now() < deadline,
                    "a second stream was never refused"
                );
                if held.is_finished() {
                    // A probe below took the slot first and the holder was refused: again.
                    match held.await.expect("holder task") {
                        Err(s) if s.code() == Code::ResourceExhausted => continue 'held,
                        other => panic!("the holder ended early: {other:?}"),
                    }
                }
                // The holder's request may not have reached the node yet: poll.
                let r = install(&mut raft, vec![chunk_of(&cluster_id, header.clone())]).await;
                match r {
                    Err(s) if s.code() == Code::ResourceExhausted => {
                        assert!(s.message().contains("one at a time"), "{s:?}");
                        break 'held (tx, held);
                    }
                    Err(s) if s.code() == Code::InvalidArgument => {}
                    other => panic!("second snapshot stream: {other:?}"),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        drop(tx);
        let first = held.await.expect("holder task");
        match first {
            Err(s) if s.code() == Code::InvalidArgument && s.message().contains("declared") => {}
            other => panic!("the held stream, ended short: {other:?}"),
        }
        // The slot is free again: the next stream is read (and its bomb header refused).
        expect_code(
            "after the held stream",
            install(&mut raft, vec![chunk_of(&cluster_id, header.clone())]).await,
            Code::InvalidArgument,
        );
    });

    for node in cluster.nodes() {
        assert!(cluster.is_running(node.id), "node {} died", node.id);
    }
    assert_eq!(
        digests(&cluster),
        before,
        "a hostile call changed some state"
    );
    // The cluster still commits writes.
    cluster
        .create_env(1, "after")
        .expect_ok("create an environment after the attack");
    cluster.wait_converged(CONVERGE_TIMEOUT);
}

/// Opens a snapshot stream that declares 1000 bytes, sends 1 and stalls until the returned
/// sender is dropped; the task ends with the node's answer.
async fn hold_snapshot_slot(
    channel: &Channel,
    cluster_id: &str,
) -> (
    tokio::sync::mpsc::Sender<SnapshotChunk>,
    tokio::task::JoinHandle<Result<tonic::Response<hub_proto::RaftReply>, tonic::Status>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<SnapshotChunk>(1);
    tx.send(SnapshotChunk {
        cluster_id: cluster_id.to_string(),
        header: snapshot_header("127.0.0.1:1"),
        data: b"x".to_vec(),
        total_bytes: 1000,
    })
    .await
    .expect("queue the first chunk");
    let mut holder = RaftClient::new(channel.clone());
    let held = tokio::spawn(async move {
        holder
            .install_snapshot(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    (tx, held)
}

fn chunk_of(cluster_id: &str, header: Vec<u8>) -> SnapshotChunk {
    SnapshotChunk {
        cluster_id: cluster_id.to_string(),
        header,
        data: Vec::new(),
        total_bytes: 0,
    }
}
