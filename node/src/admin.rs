//! Client side of the admin API, for `statestore cluster ...`: HTTP/1.1 over plain TCP, or
//! HTTPS (`https://` endpoint) checked against `--ca` (default: the system's CA bundle), with
//! `Authorization: Bearer` from `--token-file` when given.

use std::path::Path;
use std::time::Duration;

use axum::http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::admin_token::AdminToken;
use crate::cli::{ClusterAction, ClusterArgs};
use crate::error::NodeError;
use crate::http::MemberChange;

/// How long one admin call may take (adding a voter waits for it to catch up).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

fn admin(err: impl std::fmt::Display) -> NodeError {
    NodeError::Admin(err.to_string())
}

/// Where and how to reach a node's admin API.
pub struct AdminClient {
    /// `host:port` as written in the endpoint (the `Host` header).
    authority: String,
    /// Host to connect to and to check the certificate against (no brackets).
    host: String,
    port: u16,
    /// Path prefix of the endpoint (usually empty).
    prefix: String,
    tls: Option<TlsConnector>,
    token: Option<AdminToken>,
}

impl AdminClient {
    /// A client of `endpoint` (`http://host:port` or `https://host:port`), trusting the CA
    /// certificates in `ca` for HTTPS and sending the token in `token_file`.
    pub fn new(
        endpoint: &str,
        ca: Option<&Path>,
        token_file: Option<&Path>,
    ) -> Result<AdminClient, NodeError> {
        let uri: Uri = endpoint
            .parse()
            .map_err(|e| admin(format!("--endpoint {endpoint:?}: {e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(admin(format!(
                    "--endpoint {endpoint:?}: expected http://HOST:PORT or https://HOST:PORT"
                )));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| admin(format!("--endpoint {endpoint:?}: no host")))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let pem = ca
                .map(|path| {
                    std::fs::read(path)
                        .map_err(|e| NodeError::Config(format!("--ca {}: {e}", path.display())))
                })
                .transpose()?;
            Some(TlsConnector::from(crate::https::client_config(
                pem.as_deref(),
            )?))
        } else {
            if ca.is_some() {
                return Err(NodeError::Config(
                    "--ca is for an https:// endpoint".to_owned(),
                ));
            }
            None
        };
        let token = token_file
            .map(|path| AdminToken::from_file("--token-file", path))
            .transpose()?;
        Ok(AdminClient {
            authority: authority.as_str().to_owned(),
            host,
            port,
            prefix: uri.path().trim_end_matches('/').to_owned(),
            tls,
            token,
        })
    }

    /// Sends one request (`body` as JSON) and returns the status and body text.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, String), NodeError> {
        let target = format!("{}:{}", self.host, self.port);
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.authority);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {}", token.expose()));
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(bytes::Bytes::from(body.unwrap_or_default())))
            .map_err(admin)?;
        let exchange = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| admin(format!("{target}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => send(tcp, request).await,
                Some(tls) => {
                    let name = ServerName::try_from(self.host.clone())
                        .map_err(|e| admin(format!("{}: {e}", self.host)))?;
                    let stream = tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| admin(format!("TLS with {target}: {e}")))?;
                    send(stream, request).await
                }
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| admin(format!("{target}: no answer within {CALL_TIMEOUT:?}")))?
    }
}

/// One HTTP/1.1 exchange over `stream`.
async fn send<S>(
    stream: S,
    request: Request<Full<bytes::Bytes>>,
) -> Result<(StatusCode, String), NodeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(admin)?;
    let driving = tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(admin)?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(admin)?;
    driving.abort();
    Ok((
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    ))
}

/// Runs one cluster action and returns what to print.
pub async fn run(args: &ClusterArgs) -> Result<String, NodeError> {
    let client = AdminClient::new(
        &args.endpoint,
        args.ca.as_deref(),
        args.token_file.as_deref(),
    )?;
    let post = |change: &MemberChange| serde_json::to_vec(change).map_err(admin);
    let (status, body) = match &args.action {
        ClusterAction::Status => client.call(Method::GET, "/admin/status", None).await?,
        ClusterAction::AddNode { id, raft } => {
            let change = MemberChange::Add {
                id: *id,
                raft: raft.clone(),
            };
            client
                .call(Method::POST, "/admin/members", Some(post(&change)?))
                .await?
        }
        ClusterAction::RemoveNode { id } => {
            let change = MemberChange::Remove { id: *id };
            client
                .call(Method::POST, "/admin/members", Some(post(&change)?))
                .await?
        }
    };
    if !status.is_success() {
        return Err(NodeError::Admin(format!("{status}: {}", body.trim())));
    }
    Ok(match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(json) => serde_json::to_string_pretty(&json).unwrap_or(body),
        Err(_) => body,
    })
}

#[cfg(test)]
mod tests;
