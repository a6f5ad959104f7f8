//! Canary alerts as the leader sends them (issue 52 item 6; docs/CANARY.md "Alert
//! providers"): each alert of a committed tick goes to every destination of the canary's
//! `analysis.alerts` whose severity receives it, in the payload its provider type expects
//! (Flagger's shapes for `slack`, `msteams`, `discord`, `rocket` and `gchat`; the hub's own
//! JSON for `generic` and `alerts[].url`), as a `POST` through the node's one outbound client,
//! so the deny list applies.
//!
//! A send is retried with back-off and never holds up a tick (each runs in its own task). Its
//! failures are logged once per change of state and then at most every 30 s per destination
//! (`hub_log_limit`). The destination's address may be a credential (a Slack webhook's path
//! is its secret): no line, error or answer shows more than its host.

use std::time::{Duration, Instant};

use hub_engine::alert_provider::AlertProvider;
use hub_engine::canary::{AlertProviderKind, AlertTarget, Severity, StepWeights, Strategy};
use hub_engine::canary_record::Canary;
use hub_engine::state::State;
use hub_http::{Body, HttpClient, Method};
use hub_log_limit::{Change, SharedLogLimiter};
use serde_json::{json, Value};

use crate::outbound::MAX_ANSWER_BYTES;

/// Timeout of one alert POST (Flagger's is 5 s).
const ALERT_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts of one alert, the first included.
const ATTEMPTS: u32 = 3;

/// Pause before the second attempt; doubled before each later one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// The image Flagger's Google Chat card shows.
const GCHAT_IMAGE: &str = "https://flagger.app/favicon.png";

/// What the log has said of each destination (`<canary> <alert name>`).
pub type AlertLog = SharedLogLimiter<String, &'static str>;

/// One alert to one destination, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// The canary, `<environment>/<name>`.
    pub canary: String,
    /// The destination's `alerts[].name`.
    pub destination: String,
    /// How to send it.
    pub route: Route,
}

/// Where an alert goes and in which shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// POST `body` to `address`.
    Post {
        /// The URL (possibly a credential: never logged).
        address: String,
        /// The JSON body.
        body: Value,
    },
    /// Not sent, for a reason the log gives (the provider does not exist, or needs a
    /// secret the hub does not keep).
    Unsendable(&'static str),
}

/// What Flagger's notifiers are given: the canary, its environment, the message, the
/// severity and the facts of the canary (`fields`).
struct Message<'a> {
    name: &'a str,
    namespace: &'a str,
    text: &'a str,
    severity: Severity,
    fields: Vec<(&'static str, String)>,
}

/// The alerts of one committed `Action::Alert` of canary `c`, one per destination whose
/// severity receives it (as Flagger filters: `info` receives all, `warn` warnings and
/// errors, `error` errors only).
pub fn alerts_of(state: &State, c: &Canary, severity: Severity, text: &str) -> Vec<Alert> {
    let message = Message {
        name: &c.name,
        namespace: &c.environment,
        text,
        severity,
        fields: facts(c),
    };
    c.spec
        .analysis
        .alerts
        .iter()
        .filter(|d| d.receives(severity))
        .map(|d| {
            let route = match &d.target {
                AlertTarget::Url(url) => Route::Post {
                    address: url.clone(),
                    body: generic(c, &message),
                },
                AlertTarget::Provider { name, namespace } => {
                    let env = namespace.as_deref().unwrap_or(&c.environment);
                    match state.alert_provider(env, name) {
                        Some(p) => provider_route(p, c, &message),
                        None => Route::Unsendable("alert provider not found"),
                    }
                }
            };
            Alert {
                canary: c.id.clone(),
                destination: d.name.clone(),
                route,
            }
        })
        .collect()
}

/// The route to a stored provider.
fn provider_route(p: &AlertProvider, c: &Canary, m: &Message<'_>) -> Route {
    let spec = &p.spec;
    if spec.secret_ref.is_some() {
        // Flagger takes the address (and a token) from the secret, and it wins over
        // `address`: never send elsewhere than the secret would say.
        return Route::Unsendable("secretRef is not supported by this hub yet");
    }
    let Some(address) = spec.address.clone() else {
        return Route::Unsendable("the provider has no address");
    };
    let (address, body) = match spec.kind {
        AlertProviderKind::Slack => (address, slack(m, &spec.channel, &spec.username, false)),
        AlertProviderKind::Discord => (
            discord_address(&address),
            slack(m, &spec.channel, &spec.username, false),
        ),
        AlertProviderKind::Rocket => (address, slack(m, &spec.channel, &spec.username, true)),
        AlertProviderKind::Msteams => (address, msteams(m)),
        AlertProviderKind::Gchat => (address, gchat(m)),
        AlertProviderKind::Generic => (address, generic(c, m)),
    };
    Route::Post { address, body }
}

/// Flagger's facts of a canary (its `alertMetadata`): the target, the failed-checks
/// threshold, the progress deadline and how traffic is routed.
fn facts(c: &Canary) -> Vec<(&'static str, String)> {
    let spec = &c.spec;
    let mut out = vec![
        (
            "Target",
            format!(
                "{}/{}.{}",
                spec.target.kind.as_str(),
                spec.target.name,
                c.environment
            ),
        ),
        (
            "Failed checks threshold",
            spec.analysis.threshold.to_string(),
        ),
        (
            "Progress deadline",
            format!("{}s", spec.progress_deadline_seconds),
        ),
    ];
    let routing = match &spec.analysis.strategy {
        Strategy::AbTesting { .. } => Some("A/B Testing".to_string()),
        Strategy::BlueGreen { .. } => Some("Blue/Green".to_string()),
        Strategy::Canary {
            steps: StepWeights::Fixed(step),
            max_weight,
        } => Some(format!("Weight step: {step} max: {max_weight}")),
        Strategy::Canary {
            steps: StepWeights::List(steps),
            max_weight,
        } => {
            let steps: Vec<String> = steps.iter().map(u8::to_string).collect();
            Some(format!(
                "Weight steps: {} max: {max_weight}",
                steps.join(",")
            ))
        }
    };
    if let Some(r) = routing {
        out.push(("Traffic routing", r));
    }
    out
}

/// `<name>.<namespace>`, as Flagger titles an alert.
fn subject(m: &Message<'_>) -> String {
    format!("{}.{}", m.name, m.namespace)
}

/// Slack's incoming-webhook payload (also Discord's `/slack` endpoint and Rocket.Chat's):
/// one attachment coloured by severity, the facts as fields.
fn slack(m: &Message<'_>, channel: &str, username: &str, rocket: bool) -> Value {
    let color = match (m.severity == Severity::Error, rocket) {
        (true, false) => "danger",
        (false, false) => "good",
        (true, true) => "#FF0000",
        (false, true) => "#0076D7",
    };
    let fields: Vec<Value> = m
        .fields
        .iter()
        .map(|(title, value)| json!({"title": title, "value": value, "short": false}))
        .collect();
    json!({
        "channel": channel,
        "username": username,
        "icon_url": "",
        "icon_emoji": ":rocket:",
        "attachments": [{
            "color": color,
            "author_name": subject(m),
            "text": m.text,
            "mrkdwn_in": ["text"],
            "fields": fields,
        }],
    })
}

/// Discord takes Slack's payload at the webhook's `/slack` path.
fn discord_address(address: &str) -> String {
    if address.ends_with("/slack") {
        address.to_string()
    } else {
        format!("{}/slack", address.trim_end_matches('/'))
    }
}

/// An Office 365 connector card (Microsoft Teams).
fn msteams(m: &Message<'_>) -> Value {
    let facts: Vec<Value> = m
        .fields
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    json!({
        "@type": "MessageCard",
        "@context": "http://schema.org/extensions",
        "themeColor": if m.severity == Severity::Error { "FF0000" } else { "0076D7" },
        "summary": subject(m),
        "sections": [{
            "activityTitle": m.text,
            "activitySubtitle": subject(m),
            "facts": facts,
        }],
    })
}

/// A Google Chat card: the message, then one section per fact.
fn gchat(m: &Message<'_>) -> Value {
    let paragraph = |text: String| json!({"widgets": [{"textParagraph": {"text": text}}]});
    let mut sections = vec![paragraph(format!(
        "<font color=#848484><strong>{}</strong></font>",
        m.text
    ))];
    for (name, value) in &m.fields {
        sections.push(paragraph(format!(
            "{name}<br><font color=#848484><strong>{value}</strong></font>"
        )));
    }
    json!({
        "cards": [{
            "header": {"title": "Flagger", "subtitle": subject(m), "imageUrl": GCHAT_IMAGE},
            "sections": sections,
        }],
    })
}

/// The hub's own alert JSON (`alerts[].url` and `generic` providers).
fn generic(c: &Canary, m: &Message<'_>) -> Value {
    json!({
        "canary": m.name,
        "namespace": m.namespace,
        "severity": m.severity.as_str(),
        "message": m.text,
        "phase": c.status.phase.as_str(),
    })
}

/// The host of an address, all a log line may show of it.
fn host_of(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// Sends `alert` through `client`, retrying with back-off; logs through `log`.
pub async fn send(client: &HttpClient, log: &AlertLog, alert: Alert) {
    let key = format!("{} {}", alert.canary, alert.destination);
    let (address, body) = match alert.route {
        Route::Unsendable(why) => {
            if let Some(n) = log.failed(&key, why, Instant::now()) {
                tracing::warn!(canary = %alert.canary, destination = %alert.destination,
                    reason = why, alerts = n.repeats, "canary alert not sent");
            }
            return;
        }
        Route::Post { address, body } => (address, body),
    };
    let host = host_of(&address).to_string();
    let body = match serde_json::to_vec(&body) {
        Ok(b) => b,
        Err(_) => return,
    };
    let mut backoff = FIRST_BACKOFF;
    let mut failure = "";
    let mut detail = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
        let answer = client
            .call(
                Method::POST,
                &address,
                Some(Body::json(body.clone())),
                ALERT_TIMEOUT,
                MAX_ANSWER_BYTES,
            )
            .await;
        match answer {
            Ok(a) if a.status.is_success() => {
                let seen = log.succeeded(&key, Instant::now());
                if seen.is_some_and(|n| n.change == Change::Ended) {
                    tracing::info!(canary = %alert.canary, destination = %alert.destination,
                        %host, "canary alerts delivered again");
                }
                tracing::debug!(canary = %alert.canary, destination = %alert.destination,
                    %host, status = a.status.as_u16(), "canary alert sent");
                return;
            }
            Ok(a) => {
                failure = "answered with an error status";
                detail = format!("status {}", a.status.as_u16());
                // A refusal (4xx other than 429) says the same on every attempt.
                if a.status.is_client_error() && a.status.as_u16() != 429 {
                    break;
                }
            }
            Err(e) => {
                failure = "not delivered";
                // The error's kind only: its URL is the address, which may be a credential.
                detail = e.kind.to_string();
                if matches!(e.kind, hub_http::ErrorKind::Denied(_)) {
                    failure = "refused by the outbound deny list";
                    break;
                }
            }
        }
    }
    if let Some(n) = log.failed(&key, failure, Instant::now()) {
        tracing::warn!(canary = %alert.canary, destination = %alert.destination, %host,
            error = %detail, alerts = n.repeats, "canary alert {failure}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(severity: Severity) -> Message<'static> {
        Message {
            name: "podinfo",
            namespace: "test",
            text: "Canary analysis failed",
            severity,
            fields: vec![("Target", "helmChart/podinfo.test".into())],
        }
    }

    #[test]
    fn slack_rocket_and_discord_take_slacks_shape() {
        let v = slack(&message(Severity::Error), "on-call", "flagger", false);
        assert_eq!(v["channel"], "on-call");
        assert_eq!(v["icon_emoji"], ":rocket:");
        let a = &v["attachments"][0];
        assert_eq!(a["color"], "danger");
        assert_eq!(a["author_name"], "podinfo.test");
        assert_eq!(a["mrkdwn_in"], json!(["text"]));
        assert_eq!(
            a["fields"],
            json!([{"title": "Target", "value": "helmChart/podinfo.test", "short": false}])
        );
        let v = slack(&message(Severity::Info), "c", "u", true);
        assert_eq!(v["attachments"][0]["color"], "#0076D7");
        assert_eq!(
            discord_address("https://d.example/api/webhooks/1/x"),
            "https://d.example/api/webhooks/1/x/slack"
        );
        assert_eq!(
            discord_address("https://d.example/x/slack"),
            "https://d.example/x/slack"
        );
    }

    #[test]
    fn teams_and_gchat_cards() {
        let v = msteams(&message(Severity::Error));
        assert_eq!(v["@type"], "MessageCard");
        assert_eq!(v["themeColor"], "FF0000");
        assert_eq!(v["sections"][0]["activityTitle"], "Canary analysis failed");
        let v = gchat(&message(Severity::Warn));
        assert_eq!(v["cards"][0]["header"]["subtitle"], "podinfo.test");
        assert_eq!(
            v["cards"][0]["sections"][1]["widgets"][0]["textParagraph"]["text"],
            "Target<br><font color=#848484><strong>helmChart/podinfo.test</strong></font>"
        );
    }

    #[test]
    fn only_the_host_is_shown() {
        assert_eq!(
            host_of("https://hooks.slack.com/services/T/B/secret"),
            "hooks.slack.com"
        );
        assert_eq!(host_of("https://u:p@h.example:8443/x?y"), "h.example:8443");
    }
}
