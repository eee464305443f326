//! The README's SDK example, compiled by `cargo test` so the README stays true.
//! Run it against `./scripts/run-local.sh`: `cargo run -p statestore-tests --example sdk_quickstart`.

use azure_iot_operations_mqtt::aio::connection_settings::MqttConnectionSettingsBuilder;
use azure_iot_operations_mqtt::session::{Session, SessionOptionsBuilder};
use azure_iot_operations_protocol::application::ApplicationContextBuilder;
use azure_iot_operations_services::state_store::{self, SetOptions};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = MqttConnectionSettingsBuilder::default()
        .client_id("my-app")
        .hostname("127.0.0.1")
        .tcp_port(1883u16)
        .use_tls(false)
        .build()?;
    let session = Session::new(
        SessionOptionsBuilder::default()
            .connection_settings(settings)
            .build()?,
    )?;
    let client = state_store::Client::new(
        ApplicationContextBuilder::default().build()?,
        session.create_managed_client(),
        session.create_session_monitor(),
        state_store::ClientOptionsBuilder::default().build()?,
    )?;
    let exit = session.create_exit_handle();
    let run = tokio::spawn(session.run());

    let timeout = Duration::from_secs(10);
    let set = client
        .set(
            b"hello".to_vec(),
            b"world".to_vec(),
            timeout,
            None,
            SetOptions::default(),
        )
        .await?;
    let get = client.get(b"hello".to_vec(), timeout).await?;
    println!(
        "set {:?} at version {:?}; get {:?}",
        set.response, set.version, get.response
    );

    client.shutdown().await?;
    exit.try_exit()?;
    run.await??;
    Ok(())
}
