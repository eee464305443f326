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
