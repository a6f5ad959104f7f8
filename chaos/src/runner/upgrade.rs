//! The `upgrade` fault's probes (`--upgrade-from`): the new release's command submitted to a
//! node, and the wait for the leader to raise the cluster's feature level once every node
//! runs this build. What they saw is judged by `check::upgrade_gated`.

use std::time::{Duration, Instant};

use hub_engine::feature_level::SUPPORTED_LEVEL;
use hub_proto::refusal::Refusal;
use hub_proto::SubmitRequest;

use super::cluster::{connect, Cluster};
use crate::check::GateProbe;

/// How long the leader may take to raise the level once the last node serves on this build:
/// it asks the members every second, and the restarted node may still be catching up.
const LEVEL_RAISE_LIMIT: Duration = Duration::from_secs(60);

/// A command that exists only from this build's feature level on (`RevokeCertificates`,
/// level 2), harmless to the workloads: it revokes a serial no certificate of the run has.
fn new_release_command(probe: u64) -> serde_json::Value {
    serde_json::json!({"RevokeCertificates": {"certificates": [{
        "serial": format!("c4a05{probe:04x}"),
        "reason": "chaos upgrade: the feature-level gate's probe",
        "identity": null,
        "not_after": null,
    }]}})
}

/// Submits the new release's command to node `addr`, as the runner's admin.
pub async fn probe(addr: &str, probe: u64) -> GateProbe {
    let mut client = match connect(addr).await {
        Ok(c) => c,
        Err(e) => {
            return GateProbe::NoAnswer {
                error: e.to_string(),
            }
        }
    };
    let mut req = tonic::Request::new(SubmitRequest {
        command_json: new_release_command(probe).to_string(),
        request_id: format!("chaos-upgrade-probe-{probe}"),
    });
    req.set_timeout(Duration::from_secs(10));
    match client.submit(req).await {
        Ok(_) => GateProbe::Accepted,
        Err(s)
            if s.code() == tonic::Code::DeadlineExceeded
                || s.code() == tonic::Code::Unavailable =>
        {
            GateProbe::NoAnswer {
                error: s.to_string(),
            }
        }
        Err(s) => GateProbe::Refused {
            message: s.message().to_string(),
            feature_level_too_low: Refusal::of(&s) == Some(Refusal::FeatureLevelTooLow),
        },
    }
}

/// Waits until a member reports that the cluster runs this build's level; how long it took.
pub async fn wait_level_raised(cluster: &Cluster) -> anyhow::Result<Option<Duration>> {
    let start = Instant::now();
    while start.elapsed() < LEVEL_RAISE_LIMIT {
        for n in cluster.nodes()? {
            let level = cluster
                .status_of(n.id)
                .await
                .map(|s| s.cluster_feature_level);
            if level == Some(SUPPORTED_LEVEL.0) {
                return Ok(Some(start.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(None)
}
