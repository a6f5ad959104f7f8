//! The web dashboard (`hub-node --http-listen`) in a real headless Chromium, against a 3-node
//! hub with TLS, a real agent and a canary rollout: the browser trusts exactly the node's
//! key, logs in with operator tokens, follows a rollout live without reloading, shows every
//! page, and offers Approve only to an approver of the environment, whose click lands in the
//! audit as the token. The API refuses a caller without a token (401), an identity without a
//! role, a node or an agent (403), and bad or oversized bodies (400, 413), changing nothing.
//!
//! The test saves its screenshots in `CARGO_TARGET_TMPDIR/dashboard-screenshots`, or in
//! `HUB_SCREENSHOTS=DIR` (the README's come from this test).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use http_body_util::BodyExt;
use hub_client::answer::{ChangeRequestView, GetChangeRequest, ListTokens, Typed};
use hub_tests::canary::{CanaryHub, Traffic};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use hub_tls::Identity;
use serde_json::{json, Value};
use sha2::Digest;
use tower::ServiceExt;

/// How long a rollout may take on a loaded machine.
const ROLLOUT: Duration = Duration::from_secs(120);

/// The base64 SHA-256 of the public key of the certificate in `pem` (what Chromium's
/// `--ignore-certificate-errors-spki-list` pins).
fn spki_hash(pem: &std::path::Path) -> String {
    let bytes = std::fs::read(pem).expect("read the node certificate");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&bytes).expect("PEM");
    let cert = pem.parse_x509().expect("X.509");
    let digest = sha2::Sha256::digest(cert.public_key().raw);
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// A headless Chromium that trusts exactly the key `spki` and no other certificate error.
fn launch(spki: &str) -> Browser {
    let pin = format!("--ignore-certificate-errors-spki-list={spki}");
    let options = LaunchOptions::default_builder()
        .path(Some(PathBuf::from("/usr/bin/chromium")))
        // Tests run as root, where Chromium's sandbox cannot start.
        .sandbox(false)
        .ignore_certificate_errors(false)
        .window_size(Some((1360, 900)))
        .idle_browser_timeout(Duration::from_secs(600))
        .args(vec![OsStr::new(&pin), OsStr::new("--disable-gpu")])
        .build()
        .expect("launch options");
    Browser::new(options).expect("start chromium")
}

/// Evaluates `expr` in the page.
fn js(tab: &Tab, expr: &str) -> Value {
    tab.evaluate(expr, false)
        .unwrap_or_else(|e| panic!("evaluate {expr}: {e}"))
        .value
        .unwrap_or(Value::Null)
}

/// Polls `expr` until it is truthy (not null, false, 0 or ""); returns its value.
fn wait_js(tab: &Tab, expr: &str, what: &str, timeout: Duration) -> Value {
    poll_until(timeout, || {
        let v = js(tab, expr);
        let truthy = match &v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(_) | Value::Object(_) => true,
        };
        truthy.then_some(v)
    })
    .unwrap_or_else(|| {
        panic!(
            "{what}: `{expr}` never held; the page shows: {}",
            js(tab, "document.body.innerText")
        )
    })
}

/// Opens `hash` and waits until the page rendered as `page`.
fn open(tab: &Tab, hash: &str, page: &str) {
    js(tab, &format!("location.hash = {}", json!(hash)));
    wait_js(
        tab,
        &format!(
            "document.querySelector('#view').dataset.page === {}",
            json!(page)
        ),
        &format!("page {page} at {hash}"),
        CONVERGE_TIMEOUT,
    );
}

/// Saves a screenshot as `<name>.png` in `HUB_SCREENSHOTS`, or else in the test's output
/// directory (`CARGO_TARGET_TMPDIR/dashboard-screenshots`).
fn screenshot(tab: &Tab, name: &str) {
    let dir = std::env::var_os("HUB_SCREENSHOTS").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("save");
}

/// Logs in at `url` with `token`, waiting for the cluster page.
fn login(tab: &Tab, url: &str, token: &str) {
    tab.navigate_to(url).expect("navigate");
    tab.wait_until_navigated().expect("navigated");
    tab.wait_for_element("#token")
        .expect("login form")
        .click()
        .expect("focus");
    tab.type_str(token).expect("type the token");
    tab.wait_for_element("#login")
        .expect("login button")
        .click()
        .expect("log in");
}

/// Creates token `name` with `args` and returns its secret.
fn token(c: &Cluster, name: &str, args: &[&str]) -> String {
    let mut all = vec!["token", "create", "--name", name, "-o", "json"];
    all.extend_from_slice(args);
    let v = c.hubctl(&all).expect_ok("token create").json();
    v["secret"].as_str().expect("secret").to_string()
}

/// Publishes the seed's control-plane module in `staging` (no agent there), then a changed
/// version: one open change request, whose id is returned.
fn change_request(c: &Cluster) -> String {
    let sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    c.hubctl(&["env", "create", "staging"])
        .expect_ok("env create");
    for product in [
        "com.example:backend-service",
        "com.example:database-service",
        "com.example:monitoring",
    ] {
        let (group, name) = product.split_once(':').expect("group:name");
        let _ = c.submit(json!({"CreateProduct": {"product_id": product, "description": ""}}));
        let manifest = format!(
            "product-group: {group}\nproduct-name: {name}\nproduct-version: 1.0.0\n\
             artifacts:\n  - uri: charts/{name}.tgz\n    sha256: {sha}\n"
        );
        c.submit(json!({"PublishRelease": {"manifest": manifest}}))
            .expect("release");
    }
    let fixture = std::fs::read_to_string(
        std::path::PathBuf::from(
            std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
        )
        .join("../engine/tests/fixtures/modules/valid/control-plane-module.yml"),
    )
    .expect("module fixture");
    let file = c.dir().join("control-plane-module.yml");
    let path = file.to_str().expect("utf-8 path");
    std::fs::write(&file, &fixture).expect("write");
    c.hubctl(&["module", "create", "-f", path])
        .expect_ok("module create");
    c.hubctl(&[
        "module",
        "install",
        "control-plane-module",
        "-e",
        "staging",
        "--variable",
        "resourceProfile=small",
    ])
    .expect_ok("module install");
    std::fs::write(&file, fixture.replacen("small: 1Gi", "small: 1.5Gi", 1)).expect("write");
    c.hubctl(&["module", "create", "-f", path])
        .expect_ok("module create 0.2.0");
    let crs: Vec<ChangeRequestView> = c
        .hubctl(&["changerequest", "list", "--open", "-o", "json"])
        .expect_ok("changerequest list")
        .answer();
    crs.first().expect("an open change request").id.clone()
}

/// The canary: 1 s ticks up to 30% in steps of 10, judged on the success rate and p99, and
/// by a Mann-Whitney judge of the latency against the primary.
fn canary_yaml(port: u16) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: demo
  namespace: prod
spec:
  targetRef:
    kind: helmChart
    name: demo
  autoscalerRef:
    apiVersion: autoscaling/v2
    kind: HorizontalPodAutoscaler
    name: demo
  service:
    port: {port}
  progressDeadlineSeconds: 30
  analysis:
    interval: 1s
    threshold: 3
    maxWeight: 30
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 2s
      - name: request-duration
        thresholdRange:
          max: 5000
        interval: 5s
        judge: {{type: mann-whitney, baseline: primary, direction: increase, effectSize: 0.5}}
"
    )
}

/// One request to the dashboard API over `channel`: (status, headers, body).
async fn call(
    channel: tonic::transport::Channel,
    addr: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<String>,
) -> (u16, http::HeaderMap, String) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("https://{addr}{path}"));
    if let Some(b) = bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(match body {
            Some(b) => tonic::body::Body::new(http_body_util::Full::new(
                tonic::codegen::Bytes::from(b.into_bytes()),
            )),
            None => tonic::body::Body::empty(),
        })
        .expect("request");
    let res = channel.oneshot(req).await.expect("an answer");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn the_dashboard_follows_a_rollout_live_and_offers_only_what_roles_permit() {
    let hub = CanaryHub::start_on(Cluster::up(
        3,
        "--artifact-ttl-ms 500 --http-listen 127.0.0.1:0",
    ));
    let c = &hub.cluster;
    let addrs = c.logged_addrs("dashboard at /");
    let leader = c.leader_id();
    // A follower's dashboard: any node serves it, and its writes reach the leader.
    let (node, addr) = addrs
        .iter()
        .find(|(id, _)| *id != leader)
        .cloned()
        .expect("a follower");
    let viewer = token(c, "watcher", &["--role", "viewer"]);
    let nobody = token(c, "nobody", &[]);
    let cr = change_request(c);
    let approver = token(
        c,
        "release-manager",
        &["--role", "viewer", "--role", "approver=staging"],
    );
    refusals(c, &addr, &viewer, &cr);

    let pem = c.tls_files(&Identity::Node(node)).cert;
    let browser = launch(&spki_hash(&pem));
    let tab = browser.new_tab().expect("tab");
    let url = format!("https://{addr}/");

    // A token the hub does not know is refused on the login form.
    login(
        &tab,
        &url,
        "hubtok_0000000000000000000000000000000000000000000000000000000000000000",
    );
    let refused = wait_js(
        &tab,
        "document.querySelector('#login-error').textContent",
        "login refused",
        CONVERGE_TIMEOUT,
    );
    assert!(
        refused
            .as_str()
            .unwrap_or("")
            .contains("not known to this hub"),
        "{refused}"
    );

    // A token holding no role may see nothing: the login form says so.
    login(&tab, &url, &nobody);
    wait_js(
        &tab,
        "document.querySelector('#login-error').textContent.includes('token/nobody holds no role')",
        "a roleless token refused",
        CONVERGE_TIMEOUT,
    );

    // The viewer: the cluster page shows the three members and the leader.
    login(&tab, &url, &viewer);
    wait_js(
        &tab,
        "document.querySelector('#view').dataset.page === 'cluster'",
        "cluster page",
        CONVERGE_TIMEOUT,
    );
    assert_eq!(
        js(&tab, "document.querySelector('#identity').textContent"),
        "token/watcher"
    );
    assert_eq!(
        js(
            &tab,
            "document.querySelectorAll('#members tr[data-member]').length"
        ),
        3
    );
    assert_eq!(
        js(&tab, "document.querySelector('#leader').textContent"),
        format!("node {leader}")
    );
    screenshot(&tab, "cluster");

    watch_a_rollout(&hub, &tab);
    pages(&hub, &tab);

    let wx = c
        .hubctl(&[
            "window",
            "override",
            "request",
            "--env",
            "staging",
            "--duration",
            "1h",
            "--reason",
            "hotfix",
            "-o",
            "json",
        ])
        .expect_ok("window override request")
        .json()["id"]
        .as_str()
        .expect("a request id")
        .to_string();
    // The viewer sees the change request and is offered nothing.
    open(&tab, "#/modules", "modules");
    let row = format!("#change-requests tr[data-cr={}]", json!(cr));
    assert_eq!(
        js(
            &tab,
            &format!("document.querySelector('{row}').dataset.status")
        ),
        "pending-approval"
    );
    assert_eq!(
        js(
            &tab,
            &format!("document.querySelectorAll('{row} button').length")
        ),
        0
    );
    wait_js(
        &tab,
        &format!(
            "document.querySelector('#window-exceptions tr[data-wx={}]')?.querySelectorAll('button').length === 0",
            json!(wx)
        ),
        "the viewer is offered no approval of the window exception",
        CONVERGE_TIMEOUT,
    );
    // And if the viewer's page asked anyway, the hub refuses it, naming the missing role.
    let asked = tab
        .evaluate(
            &format!(
                "fetch('/api/action', {{method: 'POST', headers: {{authorization: 'Bearer ' + \
                 sessionStorage.getItem('hub-token'), 'content-type': 'application/json'}}, \
                 body: JSON.stringify({{action: 'approve_change_request', id: {}}})}})\
                 .then(async r => r.status + ' ' + (await r.json()).error)",
                json!(cr)
            ),
            true,
        )
        .expect("fetch")
        .value;
    let asked = asked.as_ref().and_then(Value::as_str).unwrap_or("");
    assert!(
        asked.starts_with("403 ") && asked.contains("needs approver on staging"),
        "{asked}"
    );

    // The approver of staging is offered Approve, and the click is audited as the token.
    js(&tab, "document.querySelector('#logout').click()");
    wait_js(&tab, "document.querySelector('#token') !== null && document.querySelector('#token').offsetParent !== null", "logged out", CONVERGE_TIMEOUT);
    login(&tab, &url, &approver);
    wait_js(
        &tab,
        "document.querySelector('#identity').textContent === 'token/release-manager'",
        "approver logged in",
        CONVERGE_TIMEOUT,
    );
    open(&tab, "#/modules", "modules");
    screenshot(&tab, "modules");
    // The admin's window-exception request on staging (issue 55): the approver of staging is
    // offered Approve, and the click opens the window.
    let wx_row = format!("#window-exceptions tr[data-wx={}]", json!(wx));
    wait_js(
        &tab,
        &format!("document.querySelector('{wx_row}')?.dataset.status === 'pending'"),
        "the window-exception request listed",
        CONVERGE_TIMEOUT,
    );
    js(
        &tab,
        &format!("document.querySelector('{wx_row} button[data-action=approve]').click()"),
    );
    wait_js(
        &tab,
        &format!("document.querySelector('{wx_row}')?.dataset.status === 'approved'"),
        "window exception approved through the page",
        CONVERGE_TIMEOUT,
    );
    js(
        &tab,
        &format!("document.querySelector('{row} button[data-action=approve]').click()"),
    );
    wait_js(
        &tab,
        &format!("document.querySelector('{row}')?.dataset.status === 'merged'"),
        "approved through the page",
        CONVERGE_TIMEOUT,
    );
    let audit = c
        .hubctl(&["audit", "--kind", "ApproveChangeRequest", "-o", "json"])
        .expect_ok("audit")
        .json();
    let text = audit.to_string();
    assert!(text.contains("token/release-manager"), "{text}");
    assert!(!text.contains(&approver), "the secret is in no audit row");
}

/// Watches the canary page while a release rolls out: the phase and weight change on the
/// page without a reload, and the chart draws the weight and both metrics.
fn watch_a_rollout(hub: &CanaryHub, tab: &Tab) {
    hub.apply(&canary_yaml(hub.port));
    let _traffic = Traffic::start(hub.port);
    hub.wait_phase("demo", ROLLOUT, |p| p == "Initialized");
    open(tab, "#/canaries/prod/demo", "canary");
    // A reload would drop this marker.
    js(tab, "window.__sameDocument = true");
    hub.publish("1.1.0");
    let mut phases: Vec<String> = Vec::new();
    let mut weights: Vec<i64> = Vec::new();
    let mut shot = false;
    poll_until(ROLLOUT, || {
        let phase = js(tab, "document.querySelector('#phase')?.textContent ?? ''");
        let weight = js(
            tab,
            "Number(document.querySelector('#weight')?.textContent ?? 0)",
        );
        let phase = phase.as_str().unwrap_or("").to_string();
        if phases.last() != Some(&phase) {
            phases.push(phase.clone());
        }
        let weight = weight.as_i64().unwrap_or(0);
        if weights.last() != Some(&weight) {
            weights.push(weight);
        }
        if !shot && weight >= 20 {
            screenshot(tab, "canary");
            shot = true;
        }
        (phase == "Succeeded").then_some(())
    })
    .unwrap_or_else(|| panic!("the page never showed Succeeded: {phases:?} {weights:?}"));
    assert_eq!(js(tab, "window.__sameDocument === true"), true, "no reload");
    assert!(phases.iter().any(|p| p == "Progressing"), "{phases:?}");
    assert!(
        weights.contains(&10) && weights.contains(&30),
        "{weights:?}"
    );
    // The chart: the weight over every committed step, and each metric the analysis judged.
    let points = |series: &str| {
        js(
            tab,
            &format!(
                "(document.querySelector('#canary-chart polyline[data-series=\"{series}\"]')?.getAttribute('points') ?? '').trim().split(/\\s+/).filter(Boolean).length"
            ),
        )
        .as_i64()
        .unwrap_or(0)
    };
    wait_js(
        tab,
        "document.querySelector('#canary-chart polyline[data-series=\"weight\"]') !== null",
        "weight series",
        CONVERGE_TIMEOUT,
    );
    let view = hub.canary("demo").expect("canary");
    let samples = view.history.as_ref().map_or(0, Vec::len) as i64;
    assert!(samples >= 5, "{view:?}");
    assert!(points("weight") >= 5, "{}", points("weight"));
    assert!(points("request-success-rate") >= 2);
    assert!(points("request-duration") >= 2);
    assert_eq!(
        js(
            tab,
            "document.querySelectorAll('#chart-legend [data-legend]').length >= 2"
        ),
        true
    );
    // The fields the hub accepted and does not act on, with why (issue 52 item 1).
    wait_js(
        tab,
        "document.querySelector('#ignored-fields tr[data-path=\"spec.autoscalerRef\"]')?.textContent.includes('runs no autoscaler') ?? false",
        "the ignored autoscalerRef listed with its reason",
        CONVERGE_TIMEOUT,
    );
    // The events card (issue 52 item 5): what each tick decided, in Flagger's words.
    wait_js(
        tab,
        "[...document.querySelectorAll('#events tr[data-event-type]')].some(r => r.textContent.includes('Promotion completed!'))",
        "the promotion's event listed",
        CONVERGE_TIMEOUT,
    );
    assert_eq!(
        js(
            tab,
            "[...document.querySelectorAll('#events tr[data-event-type]')].some(r => /Advance .* canary weight 10/.test(r.textContent))"
        ),
        true,
        "an Advance event is listed"
    );
    // The judges card: the judge's settings and its last verdict, a pass.
    wait_js(
        tab,
        "document.querySelector('#judge-verdicts tr[data-verdict=\"request-duration\"] .badge')?.textContent === 'pass'",
        "the judge's pass verdict",
        CONVERGE_TIMEOUT,
    );
    assert_eq!(
        js(
            tab,
            "document.querySelector('#judge-settings tr[data-judge=\"request-duration\"]')?.textContent.includes('primary')"
        ),
        true
    );
    let why = js(
        tab,
        "document.querySelector('#judge-verdicts tr[data-verdict=\"request-duration\"]')?.textContent ?? ''",
    );
    assert!(
        why.as_str().unwrap_or_default().contains("Cliff's delta"),
        "{why}"
    );
}

/// The entity, plans, plan, activity and audit pages, each with what it must show.
fn pages(hub: &CanaryHub, tab: &Tab) {
    let entity = &hub.entity;
    // An entity whose install waits for a secret: the constraint that blocks it, by name.
    open(
        tab,
        "#/entities/eid:staging:helmChart:database-service",
        "entity",
    );
    let blocked = wait_js(
        tab,
        "[...document.querySelectorAll('#constraints tr[data-constraint].blocked')].map(r => r.innerText).join(' ')",
        "a blocking constraint",
        CONVERGE_TIMEOUT,
    );
    assert!(
        blocked
            .as_str()
            .unwrap_or("")
            .contains("service-secret.api-key"),
        "{blocked}"
    );
    assert!(js(tab, "document.querySelector('#candidate').textContent")
        .as_str()
        .unwrap_or("")
        .contains("install"));
    screenshot(tab, "entity");
    open(tab, &format!("#/entities/{entity}"), "entity");
    let last = js(tab, "document.querySelector('#last-execution').textContent");
    assert!(last.as_str().unwrap_or("").contains("succeeded"), "{last}");
    assert!(
        js(
            tab,
            "document.querySelectorAll('#activity li, #activity tr').length"
        )
        .as_i64()
        .unwrap_or(0)
            > 0
    );

    open(tab, "#/plans", "plans");
    let plan = js(
        tab,
        "document.querySelector('#plans tr[data-plan][data-status=succeeded]')?.dataset.plan",
    );
    let plan = plan.as_str().expect("a succeeded plan").to_string();
    screenshot(tab, "plans");
    open(tab, &format!("#/plans/{plan}"), "plan");
    assert!(
        js(
            tab,
            "document.querySelectorAll('#tasks tr[data-task]').length"
        )
        .as_i64()
        .unwrap_or(0)
            > 0
    );

    open(tab, &format!("#/activity/{entity}"), "activity");
    assert!(
        js(tab, "document.querySelectorAll('#timeline li').length")
            .as_i64()
            .unwrap_or(0)
            > 0
    );

    open(tab, "#/audit", "audit");
    let rows = js(tab, "document.querySelector('#audit').innerText");
    assert!(
        rows.as_str().unwrap_or("").contains("ApplyCanary"),
        "{rows}"
    );
    screenshot(tab, "audit");
}

/// What the API refuses, over HTTP/2 with TLS: nothing without a token, nothing to an agent
/// or a node, no write to a viewer, bad and oversized bodies; the pages' security headers.
fn refusals(c: &Cluster, addr: &str, viewer: &str, cr: &str) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let anon = || async { c.anonymous_channel(addr).await.expect("connect") };
        let post = |path: &'static str, body: String| async move {
            call(anon().await, addr, "POST", path, Some(viewer), Some(body)).await
        };
        let (status, headers, body) = call(anon().await, addr, "GET", "/", None, None).await;
        assert_eq!(status, 200);
        let csp = headers["content-security-policy"].to_str().unwrap_or("");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert!(body.contains("/app.js"), "{body}");

        let (status, headers, body) =
            call(anon().await, addr, "GET", "/api/session", None, None).await;
        assert_eq!(status, 401, "{body}");
        assert!(headers.contains_key("www-authenticate"));
        assert!(body.contains("no client certificate or token"), "{body}");

        for who in [Identity::Node(1), Identity::Agent("prod".into())] {
            let ch = c.channel_as(&who, addr).await.expect("connect");
            let (status, _, body) = call(ch, addr, "GET", "/api/cluster", None, None).await;
            assert_eq!(status, 403, "{who}: {body}");
            assert!(body.contains("it is for operators"), "{body}");
        }

        let (status, _, body) = post(
            "/api/action",
            json!({"action": "approve_change_request", "id": cr}).to_string(),
        )
        .await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body.contains("token/watcher may not ApproveChangeRequest"),
            "{body}"
        );

        let (status, _, body) = post(
            "/api/action",
            r#"{"action":"delete_everything"}"#.to_string(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("bad action"), "{body}");

        let (status, _, body) = post("/api/query", "x".repeat(100 << 10)).await;
        assert_eq!(status, 413, "{body}");

        let (status, _, body) = post(
            "/api/query",
            serde_json::to_string(&ListTokens.query()).expect("JSON"),
        )
        .await;
        assert_eq!(status, 403, "a viewer does not list tokens: {body}");

        let (status, _, body) = call(
            anon().await,
            addr,
            "GET",
            "/api/wait?after=x",
            Some(viewer),
            None,
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("after"), "{body}");
    });
    // Nothing the refusals sent changed the change request.
    let v = c
        .ask(&GetChangeRequest(cr.to_string()))
        .expect("change request");
    assert_eq!(v.status, "pending-approval", "{v:?}");
}
