//! Who may open runs (`docs/security.md`), against the real process over
//! real sockets: the peer's uid/gid on a Unix socket, a bearer token or mTLS
//! on TCP, and TCP without either refused at start.

use crate::support::{PATIENCE, SidecarProcess, check, shared_cache};
use std::path::Path;
use std::process::Command;
use tether_backend::{
    CallHandler, ClientAuth, ClientError, ClientTls, ConnectOptions, RunRequest, ScriptCall, SidecarClient, ToolOutcome,
};
use tonic_health::pb::health_check_response::ServingStatus;

/// The message of a refused client's status; anything else fails the test.
fn unauthenticated(result: Result<impl std::fmt::Debug, ClientError>) -> String {
    match result {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
            status.message().to_owned()
        }
        other => panic!("expected UNAUTHENTICATED, got {other:?}"),
    }
}

/// `tether_sidecar_runs_refused_total{reason="unauthenticated"}` from `url`.
async fn refused_unauthenticated(url: &str) -> f64 {
    let body = reqwest_lite(url).await;
    let line = body
        .lines()
        .find(|line| line.starts_with("tether_sidecar_runs_refused_total{reason=\"unauthenticated\"}"))
        .unwrap_or("x 0");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// `GET url` with a real HTTP client; the body.
async fn reqwest_lite(url: &str) -> String {
    use http_body_util::{BodyExt as _, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let response = client.get(url.parse().unwrap()).await.unwrap();
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// Answers no calls: the scripts here make none.
struct NoCalls;

#[async_trait::async_trait]
impl CallHandler for NoCalls {
    async fn call(&self, call: ScriptCall) -> ToolOutcome {
        panic!("unexpected call {call:?}")
    }
}

async fn wait_ready(health_address: &str) {
    let mut health = SidecarProcess::health_client(health_address).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while check(&mut health, "").await != ServingStatus::Serving {
        assert!(tokio::time::Instant::now() < deadline, "the sidecar never became ready");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_unix_socket_admits_only_allowed_uids_and_gids() {
    let dir = tempfile::tempdir().unwrap();
    let own = nix::unistd::Uid::current().as_raw();
    let gid = nix::unistd::Gid::current().as_raw();
    let stranger = own.wrapping_add(4242);

    // The default: the sidecar's own uid — this test's.
    let socket = dir.path().join("own.sock");
    let default = SidecarProcess::start_exactly(&shared_cache(), &["--socket", socket.to_str().unwrap()]);
    let client = SidecarClient::connect(&format!("unix:{}", socket.display())).await.unwrap();
    client.describe().await.expect("the sidecar's own uid is allowed by default");
    drop(default);

    // Only another uid: this client is refused, counted, and logged.
    let socket = dir.path().join("other.sock");
    let other = stranger.to_string();
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &["--socket", socket.to_str().unwrap(), "--allow-uid", &other, "--metrics-listen", "127.0.0.1:0"],
    );
    let client = SidecarClient::connect(&format!("unix:{}", socket.display())).await.unwrap();
    let message = unauthenticated(client.describe().await);
    assert!(!message.contains(&own.to_string()), "no detail leaked: {message}");
    assert_eq!(refused_unauthenticated(sidecar.metrics_url.as_deref().unwrap()).await, 1.0);
    let log = sidecar.log();
    assert!(log.contains(&format!("peer uid `{own}`")), "the cause is in the sidecar's log:\n{log}");
    drop(sidecar);

    // The same uid list plus this client's primary gid: admitted by group.
    let socket = dir.path().join("group.sock");
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &["--socket", socket.to_str().unwrap(), "--allow-uid", &other, "--allow-gid", &gid.to_string()],
    );
    let client = SidecarClient::connect(&format!("unix:{}", socket.display())).await.unwrap();
    client.describe().await.expect("an allowed gid is let in");
    drop(sidecar);
}

#[tokio::test]
async fn a_token_lets_its_holder_in_and_every_other_client_gets_the_same_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "correct-horse-battery\n").unwrap();
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            token_file.to_str().unwrap(),
            "--metrics-listen",
            "127.0.0.1:0",
            "--health-listen",
            "127.0.0.1:0",
        ],
    );
    let url = format!("http://{}", sidecar.address);
    let with = |token: Option<&str>| ConnectOptions {
        auth: ClientAuth { token: token.map(str::to_owned), tls: None },
        ..Default::default()
    };

    let missing = unauthenticated(SidecarClient::connect(&url).await.unwrap().describe().await);
    let wrong = unauthenticated(
        SidecarClient::connect_with(&url, &with(Some("correct-horse"))).await.unwrap().describe().await,
    );
    let near = unauthenticated(
        SidecarClient::connect_with(&url, &with(Some("correct-horse-battery2"))).await.unwrap().describe().await,
    );
    assert_eq!(missing, wrong, "one message for every cause");
    assert_eq!(wrong, near, "one message for every cause");
    assert!(!wrong.contains("token"), "no detail leaked: {wrong}");
    assert_eq!(refused_unauthenticated(sidecar.metrics_url.as_deref().unwrap()).await, 3.0);

    // The holder opens a real run: the token goes with the run's stream too.
    let client = SidecarClient::connect_with(&url, &with(Some("correct-horse-battery"))).await.unwrap();
    client.describe().await.expect("the right token is let in");
    wait_ready(sidecar.health_address.as_deref().unwrap()).await;
    let outcome = client.run(RunRequest::python("token-run", "6 * 7"), &NoCalls).await.unwrap();
    assert_eq!(outcome.result, Some(serde_json::json!(42)), "{outcome:?}");
    let stranger = SidecarClient::connect(&url).await.unwrap();
    unauthenticated(stranger.run(RunRequest::python("stranger-run", "6 * 7"), &NoCalls).await);
    assert_eq!(refused_unauthenticated(sidecar.metrics_url.as_deref().unwrap()).await, 4.0);
}

/// A CA and what it signs, as PEM.
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn issue(subject: &str, ca: &rcgen::Issuer<'_, rcgen::KeyPair>) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![subject.to_owned()]).unwrap().signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(params, key).unwrap();
    Pki { ca: ca.pem(), server: issue("localhost", &ca), client: issue("backend", &ca) }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn mtls_admits_clients_with_a_certificate_from_the_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let (trusted, untrusted) = (pki(), pki());
    let (cert, key, ca) = (
        write(dir.path(), "cert.pem", &trusted.server.0),
        write(dir.path(), "key.pem", &trusted.server.1),
        write(dir.path(), "ca.pem", &trusted.ca),
    );
    let sidecar = SidecarProcess::start_exactly(
        &shared_cache(),
        &["--listen", "127.0.0.1:0", "--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca],
    );
    let url = format!("https://{}", sidecar.address);
    let tls = |client: &(String, String)| ClientTls {
        ca_pem: trusted.ca.clone().into_bytes(),
        cert_pem: client.0.clone().into_bytes(),
        key_pem: client.1.clone().into_bytes(),
        domain: Some("localhost".into()),
    };
    let auth =
        |client| ConnectOptions { auth: ClientAuth { token: None, tls: Some(tls(client)) }, ..Default::default() };

    let good =
        SidecarClient::connect_with(&url, &auth(&trusted.client)).await.expect("a certificate from the CA is let in");
    good.describe().await.expect("a certificate from the CA is let in");

    // A certificate from another CA, and none at all: the handshake fails,
    // so no request gets through (the error comes at connect or first call).
    let bad = async |auth: ConnectOptions| match SidecarClient::connect_with(&url, &auth).await {
        Err(error) => error.to_string(),
        Ok(client) => client.describe().await.expect_err("refused").to_string(),
    };
    let untrusted_error = bad(auth(&untrusted.client)).await;
    let no_cert = {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&trusted.ca))
            .domain_name("localhost");
        let endpoint = tonic::transport::Endpoint::from_shared(url.clone()).unwrap().tls_config(tls).unwrap();
        match endpoint.connect().await {
            Err(error) => format!("{error:?}"),
            Ok(channel) => SidecarClient::from_channel(channel).describe().await.expect_err("refused").to_string(),
        }
    };
    eprintln!("untrusted certificate: {untrusted_error}\nno certificate: {no_cert}");
    // Plain HTTP/2 to the TLS port gets nowhere either.
    let plain = SidecarClient::connect(&format!("http://{}", sidecar.address)).await;
    assert!(plain.is_err() || plain.unwrap().describe().await.is_err(), "plaintext is refused");
}

#[test]
fn tcp_without_authentication_refuses_to_start_unless_an_explicit_loopback() {
    let start = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tether-sidecar"))
            .args(args)
            .env_remove("TETHER_TOKEN")
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    let open = start(&["--listen", "0.0.0.0:0"]);
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert!(!open.status.success(), "{stderr}");
    for option in ["--token-file", "--tls-cert", "--socket", "--insecure-loopback"] {
        assert!(stderr.contains(option), "the refusal names `{option}`: {stderr}");
    }
    let open = start(&["--listen", "0.0.0.0:0", "--insecure-loopback"]);
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert!(!open.status.success(), "{stderr}");
    assert!(stderr.contains("only for loopback"), "{stderr}");
    let nothing = start(&[]);
    let stderr = String::from_utf8_lossy(&nothing.stderr);
    assert!(!nothing.status.success() && stderr.contains("--socket PATH"), "{stderr}");
}

#[tokio::test]
async fn an_explicit_insecure_loopback_serves_every_local_client() {
    let sidecar = SidecarProcess::start(&shared_cache(), &[]);
    let client = SidecarClient::connect(&format!("http://{}", sidecar.address)).await.unwrap();
    client.describe().await.expect("an insecure loopback lets a client without credentials in");
}
