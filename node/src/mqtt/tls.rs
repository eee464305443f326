//! TLS to the broker: the TCP connector of ntex-mqtt wrapped in a rustls client layer
//! (ntex-tls), and the loop that re-reads the certificate files.
//!
//! Each connection attempt takes the configuration current at that moment, so changed files
//! are used from the next connection on; a connection already up is kept (see README
//! "TLS to the broker" for why a reload does not force a reconnect).

use std::sync::Arc;

use ntex_io::{Io, Layer};
use ntex_net::connect::{Connect, ConnectError};
use ntex_service::cfg::SharedCfg;
use ntex_service::{ServiceFactory, fn_service};
use ntex_tls::rustls::TlsClientFilter;
use tokio::sync::watch;

use super::{BrokerAddress, BrokerTls};
use crate::metrics::MqttMetrics;
use crate::tls::{Loaded, Reload};

/// A connector that opens TCP to the broker and completes a TLS handshake over it, checking
/// the broker's certificate for `tls.server_name` with the configuration current now.
pub(super) fn connector(
    tls: &BrokerTls,
) -> impl ServiceFactory<
    Connect<BrokerAddress>,
    SharedCfg,
    Response = Io<Layer<TlsClientFilter>>,
    Error = ConnectError,
    InitError = (),
> + use<> {
    let loaded = tls.config.current();
    let server_name = tls.server_name.clone();
    fn_service(move |request: Connect<BrokerAddress>| {
        let (config, verifier) = loaded.for_one_connection();
        let server_name = server_name.clone();
        async move {
            let io = ntex_net::connect::connect(request).await?;
            TlsClientFilter::create(io, config, server_name.clone())
                .await
                .map_err(|err| match verifier.refusal() {
                    // ntex-tls reports a refused certificate as "disconnected".
                    Some(refusal) => ConnectError::Io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "the broker's certificate is refused for {}: {refusal}",
                            server_name.to_str()
                        ),
                    )),
                    None => ConnectError::Io(err),
                })
        }
    })
}

/// Sets the client certificate's expiry gauge (or drops it when the expiry cannot be read).
fn record_not_after(metrics: &MqttMetrics, tls: &BrokerTls, loaded: &Loaded) {
    let Some(identity) = &tls.config.files().client else {
        return;
    };
    let file = identity.cert.display().to_string();
    let gauge = &metrics.tls_client_cert_not_after_seconds;
    match loaded.client_not_after {
        Some(not_after) => gauge.with_label_values(&[&file]).set(not_after),
        None => {
            let _ = gauge.remove_label_values(&[&file]);
        }
    }
}

/// Records the client certificate's expiry, then checks the TLS files every
/// `tls.reload_interval` until `stop`: a valid change is used for the next connection (INFO),
/// an unusable one is refused and the last good files stay in use (WARN); both are counted in
/// `statestore_mqtt_tls_reloads_total`.
pub async fn watch_tls_files(
    tls: BrokerTls,
    metrics: Arc<MqttMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    record_not_after(&metrics, &tls, &tls.config.current());
    let files = tls.config.files();
    // The system's CA certificates are read once: only given files are followed.
    let nothing_to_follow = files.ca.is_none() && files.client.is_none();
    let Some(interval) = tls.reload_interval.filter(|_| !nothing_to_follow) else {
        // Nothing to follow: idle until the node stops (the supervisor reads an earlier end
        // as a failure).
        let _ = stop.wait_for(|stopped| *stopped).await;
        return;
    };
    let reloading = tls.config.clone();
    let check = move || reloading.check();
    crate::file_watch::check_every(interval, stop, check, |outcome| {
        match outcome {
            Reload::Unchanged => {}
            Reload::Reloaded(loaded) => {
                metrics.tls_reloads_total.with_label_values(&["ok"]).inc();
                record_not_after(&metrics, &tls, &loaded);
                tracing::info!(
                    ca_file = ?files.ca,
                    cert_file = ?files.client.as_ref().map(|c| &c.cert),
                    key_file = ?files.client.as_ref().map(|c| &c.key),
                    "broker TLS files changed: reloaded; the next connection to the broker uses them"
                );
            }
            Reload::Failed(err) => {
                metrics
                    .tls_reloads_total
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(error = %err, "broker TLS files changed but cannot be used; keeping the last good ones");
            }
        }
    })
    .await;
}
