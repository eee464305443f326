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

impl AdminToken {
    /// The token in `text`: its first line without surrounding whitespace; at least
    /// [`MIN_TOKEN_CHARS`] characters, and nothing a header could not carry.
    pub fn parse(text: &str) -> Result<AdminToken, String> {
        let token = text.lines().next().unwrap_or_default().trim();
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(format!(
                "the token must be at least {MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 32`)"
            ));
        }
        if !token.chars().all(|c| c.is_ascii_graphic()) {
            return Err("the token must be printable ASCII without spaces".into());
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
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const TOKEN: &str = "0123456789abcdef0123";

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = AdminToken::parse(&format!("  {TOKEN}\nsecond line ignored\n")).expect("ok");
        assert_eq!(token.expose(), TOKEN, "first line, trimmed");
        assert!(token.admits(&headers(&format!("Bearer {TOKEN}"))));
        assert!(
            token.admits(&headers(&format!("bearer {TOKEN}"))),
            "the scheme is case-insensitive"
        );
        assert!(!token.admits(&HeaderMap::new()), "no header");
        assert!(!token.admits(&headers(TOKEN)), "no scheme");
        assert!(!token.admits(&headers(&format!("Basic {TOKEN}"))));
        assert!(
            !token.admits(&headers("Bearer 0123456789abcdef0124")),
            "one byte off"
        );
        assert!(
            !token.admits(&headers(&format!("Bearer {TOKEN}0"))),
            "longer"
        );
        assert!(
            !token.admits(&headers("Bearer 0123456789abcdef012")),
            "shorter"
        );
        assert!(!token.admits(&headers("Bearer ")), "empty");
        assert!(
            !token.admits(&headers(&format!("Bearer  {TOKEN}"))),
            "extra space"
        );
    }

    #[test]
    fn short_or_unprintable_tokens_are_refused() {
        assert!(AdminToken::parse("").is_err());
        assert!(
            AdminToken::parse("\n0123456789abcdef").is_err(),
            "first line empty"
        );
        assert!(AdminToken::parse("short").is_err());
        assert!(
            AdminToken::parse("0123456789 abcdef").is_err(),
            "space inside"
        );
        assert!(AdminToken::parse("0123456789abcdéf0").is_err(), "not ASCII");
        assert!(
            AdminToken::parse("0123456789abcdef").is_ok(),
            "16 is enough"
        );
    }

    #[test]
    fn without_a_token_everything_is_admitted_and_with_one_refusals_are_counted() {
        assert!(AdminAuth::open().admits(&HeaderMap::new()));
        let registry = Registry::new();
        let auth =
            AdminAuth::new(Some(AdminToken::parse(TOKEN).expect("ok")), &registry).expect("metric");
        assert!(!auth.admits(&HeaderMap::new()));
        assert!(auth.admits(&headers(&format!("Bearer {TOKEN}"))));
        assert_eq!(auth.refused(), 0, "admits() alone counts nothing");
    }

    #[test]
    fn a_missing_file_is_refused_naming_the_setting() {
        let err = AdminToken::from_file("admin.token_file", Path::new("/nonexistent/token"))
            .expect_err("missing");
        assert!(err.to_string().contains("admin.token_file"), "{err}");
    }
}
