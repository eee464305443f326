//! The admin API's bearer token (`admin.token_file`): the endpoint that changes the cluster
//! (`POST /admin/members`) and the one that costs a pass over the whole keyspace
//! (`GET /admin/digest`, issue 27) answer 401 unless the request carries `Authorization: Bearer
//! <token>`; the cheap read-only ones (`/metrics`, `/livez`, `/readyz`, `/admin/status`) stay
//! open. Without a token file nothing is checked, as before.
//!
//! The comparison takes the same time whatever the bytes (`subtle`); only a length mismatch
//! shows sooner. Refusals are logged and counted in
//! `statestore_http_admin_unauthorized_total`.

use std::path::Path;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{IntCounter, Registry};
use subtle::ConstantTimeEq;

use crate::error::NodeError;

/// The shortest token accepted: 16 characters (`openssl rand -hex 32` gives 64).
pub const MIN_TOKEN_CHARS: usize = 16;

/// A secret read from `admin.token_file`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// Why a token file's first line is no admin token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// Fewer than [`MIN_TOKEN_CHARS`] characters.
    #[error(
        "the token must be at least {MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 32`)"
    )]
    TooShort,
    /// A character an `Authorization` header could not carry.
    #[error("the token must be printable ASCII without spaces")]
    NotPrintable,
}

impl AdminToken {
    /// The token in `text`: its first line without surrounding whitespace; at least
    /// [`MIN_TOKEN_CHARS`] characters, and nothing a header could not carry.
    pub fn parse(text: &str) -> Result<AdminToken, TokenRefusal> {
        let token = text.lines().next().unwrap_or_default().trim();
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(TokenRefusal::TooShort);
        }
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err(TokenRefusal::NotPrintable);
        }
        Ok(AdminToken(token.to_owned()))
    }

    /// Reads the token from `path` (the error names `setting`).
    pub fn from_file(setting: &str, path: &Path) -> Result<AdminToken, NodeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| NodeError::Config(format!("{setting} {}: {e}", path.display())))?;
        AdminToken::parse(&text)
            .map_err(|e| NodeError::Config(format!("{setting} {}: {e}", path.display())))
    }

    /// The token's text (for a client's `Authorization` header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when `headers` carry `Authorization: Bearer <this token>` (the scheme's case does
    /// not matter, RFC 6750).
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let Some((scheme, presented)) = value.as_bytes().split_first_chunk::<7>() else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"Bearer ") && bool::from(presented.ct_eq(self.0.as_bytes()))
    }
}

/// What guards the mutating and costly endpoints: the token, if one is configured, and the
/// refusal counter.
#[derive(Clone)]
pub struct AdminAuth {
    token: Option<AdminToken>,
    unauthorized: IntCounter,
}

impl AdminAuth {
    /// Guards with `token` (`None`: the endpoints stay open), counting refusals into
    /// `registry`.
    pub fn new(token: Option<AdminToken>, registry: &Registry) -> prometheus::Result<AdminAuth> {
        let unauthorized = IntCounter::new(
            "statestore_http_admin_unauthorized_total",
            "Requests to a guarded admin endpoint (POST /admin/members, GET /admin/digest) refused for a missing or wrong bearer token.",
        )?;
        registry.register(Box::new(unauthorized.clone()))?;
        Ok(AdminAuth {
            token,
            unauthorized,
        })
    }

    /// No token: every request passes (tests, and nodes without `admin.token_file`).
    pub fn open() -> AdminAuth {
        AdminAuth {
            token: None,
            unauthorized: IntCounter::new("unregistered", "unregistered")
                .unwrap_or_else(|e| unreachable!("static metric: {e}")),
        }
    }

    /// True when the request may go on.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        self.token
            .as_ref()
            .is_none_or(|token| token.admits(headers))
    }

    /// Refusals so far.
    pub fn refused(&self) -> u64 {
        self.unauthorized.get()
    }
}

/// Middleware of the guarded routes: 401 without the right bearer token.
pub async fn require_token(
    State(auth): State<AdminAuth>,
    request: Request,
    next: Next,
) -> Response {
    if auth.admits(request.headers()) {
        return next.run(request).await;
    }
    auth.unauthorized.inc();
    tracing::warn!(
        path = %request.uri().path(),
        presented = request.headers().contains_key(header::AUTHORIZATION),
        "admin request refused: missing or wrong bearer token"
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a bearer token is required (Authorization: Bearer <admin.token_file>)\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
