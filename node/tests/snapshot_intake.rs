//! The snapshot intake of `Raft.InstallSnapshot` (SPEC S3): a stream that stalls is cut off
//! at the whole-stream deadline, which frees the node's one snapshot slot. In process: one
//! node (never initialised, so nothing else talks to it) behind a real tonic server.

use std::time::{Duration, Instant};

use hub_node::node::{HubNode, NodeConfig};
use hub_node::raft_service::RaftService;
use hub_proto::raft_client::RaftClient;
use hub_proto::raft_server::RaftServer;
use hub_proto::SnapshotChunk;
use openraft::async_runtime::watch::WatchReceiver;
use raft_store::codec;
use tonic::Code;

async fn start(dir: &std::path::Path, deadline: Duration) -> (String, std::sync::Arc<HubNode>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = NodeConfig {
        id: 1,
        listen: addr,
        advertise: addr.to_string(),
        data_dir: dir.join("node-1"),
        cluster_id: "intake".into(),
        heartbeat_ms: 100,
        election_min_ms: 300,
        election_max_ms: 600,
        request_timeout: Duration::from_secs(5),
        snapshot_logs: 10_000,
        keep_logs: 1_000,
        artifact_ttl: Duration::from_secs(60),
        artifact_timeout: Duration::from_secs(5),
        outbound_deny: hub_http::DenyList::none(),
        outbound_ca_pem: None,
        connector: hub_tls::client::Connector::new(
            hub_tls::client::ClientMode::Plaintext,
            Duration::from_millis(500),
        ),
    };
    let node = HubNode::start(&cfg).await.expect("start the node");
    let svc = RaftService::new(
        node.raft.clone(),
        node.cluster_id.clone(),
        node.leader_contact.clone(),
        node.sm.clone(),
        node.stopping.clone(),
    )
    .with_receive_deadline(deadline);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RaftServer::new(svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{addr}"), node)
}

fn header() -> Vec<u8> {
    codec::encode(&(
        raft_store::Vote::new(1, 2),
        raft_store::SnapshotMeta::default(),
    ))
}

/// Opens a snapshot stream that declares `declared` bytes, sends one, then stalls with the
/// sender kept open; expects the node to cut it off with DEADLINE_EXCEEDED. Returns how long
/// that took.
async fn cut_off_after_one_byte(
    raft: &mut RaftClient<tonic::transport::Channel>,
    declared: u64,
) -> Duration {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(SnapshotChunk {
        cluster_id: "intake".into(),
        header: header(),
        data: vec![0],
        total_bytes: declared,
    })
    .await
    .unwrap();
    let started = Instant::now();
    let r = raft
        .install_snapshot(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    let took = started.elapsed();
    match r {
        Err(s) if s.code() == Code::DeadlineExceeded => {}
        other => panic!("expected DEADLINE_EXCEEDED, got {other:?}"),
    }
    drop(tx);
    took
}

#[tokio::test]
async fn a_stalled_snapshot_stream_is_cut_off_at_the_deadline_and_frees_the_slot() {
    let tmp = tempfile::tempdir().unwrap();
    let deadline = Duration::from_millis(500);
    let (url, node) = start(tmp.path(), deadline).await;
    let mut raft = RaftClient::connect(url).await.unwrap();

    // Declares 1,000 bytes, sends 1, then stalls.
    let took = cut_off_after_one_byte(&mut raft, 1_000).await;
    assert!(
        took >= deadline && took < Duration::from_secs(10),
        "{took:?}"
    );

    // The slot is free: the next stream is read at once (and its short data refused).
    let r = raft
        .install_snapshot(tokio_stream::iter([SnapshotChunk {
            cluster_id: "intake".into(),
            header: header(),
            data: vec![0; 10],
            total_bytes: 20,
        }]))
        .await;
    match r {
        Err(s) if s.code() == Code::InvalidArgument && s.message().contains("declared") => {}
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    let _ = node.raft.shutdown().await;
}

/// The deadline grows with the declared size: a large snapshot gets the time its bytes need
/// (a fixed deadline cut off every catch-up of a large state), a stall is still cut off.
#[tokio::test]
async fn the_deadline_grows_with_the_declared_size() {
    let tmp = tempfile::tempdir().unwrap();
    let base = Duration::from_millis(500);
    let (url, node) = start(tmp.path(), base).await;
    let mut raft = RaftClient::connect(url).await.unwrap();
    let declared = 4 * hub_node::network::SNAPSHOT_MIN_BYTES_PER_SEC;
    let deadline = base + hub_node::network::snapshot_allowance(declared);
    assert_eq!(deadline, Duration::from_millis(4_500));
    let took = cut_off_after_one_byte(&mut raft, declared).await;
    assert!(took >= deadline && took < deadline * 4, "{took:?}");
    let _ = node.raft.shutdown().await;
}

/// A snapshot whose stream is whole but whose file does not decode is refused before Raft
/// installs it (a failed install would be a storage error, which stops the node), and its
/// file is removed.
#[tokio::test]
async fn a_whole_stream_of_a_bad_file_is_refused_and_the_node_stays_up() {
    let tmp = tempfile::tempdir().unwrap();
    let (url, node) = start(tmp.path(), Duration::from_secs(30)).await;
    let mut raft = RaftClient::connect(url).await.unwrap();
    // A file header that promises one record, then bytes that are not one.
    let mut data = codec::encode(&(
        None::<raft_store::LogId>,
        raft_store::StoredMembership::default(),
        1u64,
    ));
    data.extend_from_slice(&[0xff; 64]);
    let total_bytes = data.len() as u64;
    let chunks: Vec<SnapshotChunk> = data
        .chunks(16)
        .enumerate()
        .map(|(i, part)| SnapshotChunk {
            cluster_id: "intake".into(),
            header: if i == 0 { header() } else { Vec::new() },
            data: part.to_vec(),
            total_bytes: if i == 0 { total_bytes } else { 0 },
        })
        .collect();
    let r = raft.install_snapshot(tokio_stream::iter(chunks)).await;
    match r {
        Err(s) if s.code() == Code::InvalidArgument && s.message().contains("snapshot refused") => {
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    assert!(
        !raft_store::incoming_path(&tmp.path().join("node-1")).exists(),
        "the refused file is removed"
    );
    // Raft never saw it: its core is still running.
    let metrics = node.raft.metrics();
    assert!(metrics.borrow_watched().running_state.is_ok());
    let _ = node.raft.shutdown().await;
}
