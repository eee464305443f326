//! Client side of the admin API, for `statestore cluster ...`.

use crate::cli::ClusterAction;
use crate::error::NodeError;
use crate::http::MemberChange;

/// Runs one cluster action against `endpoint` and returns what to print.
pub async fn run(endpoint: &str, action: &ClusterAction) -> Result<String, NodeError> {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .no_proxy()
        .build()
        .map_err(|e| NodeError::Admin(e.to_string()))?;
    let base = endpoint.trim_end_matches('/');
    let response = match action {
        ClusterAction::Status => http.get(format!("{base}/admin/status")).send().await,
        ClusterAction::AddNode { id, raft } => {
            post(
                &http,
                base,
                &MemberChange::Add {
                    id: *id,
                    raft: raft.clone(),
                },
            )
            .await
        }
        ClusterAction::RemoveNode { id } => {
            post(&http, base, &MemberChange::Remove { id: *id }).await
        }
    }
    .map_err(|e| NodeError::Admin(format!("{base}: {e}")))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| NodeError::Admin(e.to_string()))?;
    if !status.is_success() {
        return Err(NodeError::Admin(format!("{status}: {}", body.trim())));
    }
    Ok(match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(json) => serde_json::to_string_pretty(&json).unwrap_or(body),
        Err(_) => body,
    })
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    change: &MemberChange,
) -> reqwest::Result<reqwest::Response> {
    let body = serde_json::to_vec(change).unwrap_or_default();
    http.post(format!("{base}/admin/members"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
}
