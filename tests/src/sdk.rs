//! The official Rust SDK client (`azure_iot_operations_services`, `state_store`: 1.3 in
//! `statestore-tests`, 1.5.0-beta1 in `tests/sdk-next`, which compiles this file too), as a
//! user would set it up: one MQTT session per client, no TLS, against the test broker.

use std::sync::Arc;
use std::time::Duration;

use azure_iot_operations_mqtt::aio::connection_settings::MqttConnectionSettingsBuilder;
use azure_iot_operations_mqtt::session::{Session, SessionExitHandle, SessionOptionsBuilder};
use azure_iot_operations_protocol::application::ApplicationContextBuilder;
use azure_iot_operations_services::state_store;

/// Request timeout used by the tests.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A connected SDK state store client.
pub struct SdkClient {
    /// The SDK client.
    pub client: Arc<state_store::Client>,
    /// Its MQTT client id.
    pub client_id: String,
    exit: SessionExitHandle,
    session: tokio::task::JoinHandle<()>,
}

impl SdkClient {
    /// Connects `client_id` to the broker on 127.0.0.1:`port` and waits for the session.
    pub async fn connect(port: u16, client_id: &str) -> SdkClient {
        SdkClient::connect_with(client_id, |settings| settings.tcp_port(port).use_tls(false)).await
    }

    /// Connects `client_id` to 127.0.0.1 with the settings `configure` adds (port, TLS files, a
    /// user name and password) and waits for the session.
    pub async fn connect_with(
        client_id: &str,
        configure: impl FnOnce(MqttConnectionSettingsBuilder) -> MqttConnectionSettingsBuilder,
    ) -> SdkClient {
        let builder = MqttConnectionSettingsBuilder::default()
            .client_id(client_id)
            .hostname("127.0.0.1")
            .keep_alive(Duration::from_secs(5));
        let settings = configure(builder).build().expect("connection settings");
        let options = SessionOptionsBuilder::default()
            .connection_settings(settings)
            .build()
            .expect("session options");
        let session = Session::new(options).expect("session");
        let application = ApplicationContextBuilder::default()
            .build()
            .expect("application context");
        let monitor = session.create_session_monitor();
        let client = state_store::Client::new(
            application,
            session.create_managed_client(),
            session.create_session_monitor(),
            state_store::ClientOptionsBuilder::default()
                .build()
                .expect("client options"),
        )
        .expect("state store client");
        let exit = session.create_exit_handle();
        let session = tokio::spawn(async move {
            let _ = session.run().await;
        });
        tokio::time::timeout(Duration::from_secs(10), monitor.connected())
            .await
            .expect("SDK session connects");
        // The client subscribes to its response and notification topics right after connecting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        SdkClient {
            client: Arc::new(client),
            client_id: client_id.to_owned(),
            exit,
            session,
        }
    }

    /// Shuts the client down and ends its session.
    pub async fn shutdown(self) {
        let _ = self.client.shutdown().await;
        let _ = self.exit.try_exit();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.session).await;
    }
}
