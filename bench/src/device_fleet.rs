//! The devices of the `devicebound` benchmark: one rumqttc MQTT 5 client and event-loop task
//! per device (clean start, Nagle off, any unique client id: the device is its topic),
//! subscribed at QoS 1 to `devices/{id}/messages/devicebound/#`. Once subscribed, a device
//! announces itself with one QoS 1 publish on `devices/{id}/messages/events` (any publish under
//! its `messages/` topics resets the leader's offline backoff, devicebound.md §3; without it a
//! device that was offline while its messages were pushed waits up to 30 s). It completes every
//! delivery at once on `devices/{id}/messages/settle/complete/{$.lt}` (QoS 1, no reply asked,
//! as an IoT Hub device does) and tells the shared [`Recorder`] what it received. Devices are
//! connected with bounded concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use bytes::Bytes;
use futures::StreamExt;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::device_recorder::{Recorder, delivery_fields};
use crate::device_send::{DeviceIds, Kind};
use crate::mqtt_load::{Broker, suback_result, unique_id, warn_connection_lost};

/// Outgoing QoS 1 publishes (completions, the announcement) a device keeps in flight.
const DEVICE_OUTGOING_INFLIGHT: u16 = 16;
/// Connection attempts a device makes before its first SUBACK, like a real device retrying
/// (a burst of connects can see one reset by the broker); then it gives up and the run fails.
const CONNECT_ATTEMPTS: u32 = 3;
/// How long one connection attempt may take, seconds.
const CONNECTION_TIMEOUT_SECS: u64 = 10;
/// How long a device waits for its CONNACK + SUBACK: every attempt may take its whole
/// connection timeout, with 5 s to spare.
const SUBSCRIBE_WAIT: Duration =
    Duration::from_secs(CONNECT_ATTEMPTS as u64 * CONNECTION_TIMEOUT_SECS + 5);

/// Connection losses of devices (after they were connected), and completions that could not be
/// handed to the client; since the process started.
static DEVICE_DISCONNECTS: AtomicU64 = AtomicU64::new(0);
/// First connection attempts that failed and were retried (warned about, not counted as
/// losses).
static DEVICE_CONNECT_RETRIES: AtomicU64 = AtomicU64::new(0);
static SETTLE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Device connection losses so far.
pub fn disconnects() -> u64 {
    DEVICE_DISCONNECTS.load(Ordering::Relaxed)
}

/// Completions that could not be published so far.
pub fn settle_failures() -> u64 {
    SETTLE_FAILURES.load(Ordering::Relaxed)
}

/// When one device connected.
#[derive(Debug, Clone, Copy)]
pub struct Connected {
    /// Just before its CONNECT.
    pub started: Instant,
    /// When its SUBACK arrived.
    pub subscribed: Instant,
}

/// One connected device.
struct Device {
    client: AsyncClient,
    closing: Arc<AtomicBool>,
    events: JoinHandle<()>,
}

/// Connected devices; dropping it aborts their tasks (use [`Fleet::disconnect`] to leave
/// politely, so the broker drops their subscriptions at once).
pub struct Fleet {
    devices: Vec<Device>,
}

fn device_options(broker: &Broker, client_id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, broker.host.clone(), broker.port);
    options.set_keep_alive(Duration::from_secs(60));
    options.set_clean_start(true);
    options.set_max_packet_size(Some(1 << 20));
    options.set_receive_maximum(Some(64));
    // rumqttc sizes its outgoing-publish table by this limit (default 65,535 slots, ~16 MB per
    // client); a device has at most a few completions in flight.
    options.set_outgoing_inflight_upper_limit(DEVICE_OUTGOING_INFLIGHT);
    let mut network = options.network_options();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(CONNECTION_TIMEOUT_SECS);
    options.set_network_options(network);
    options
}

/// Publishes the completion of `token` without waiting on the event loop that calls it.
fn complete(client: &AsyncClient, device_id: &str, token: &str) {
    let topic = format!("devices/{device_id}/messages/settle/complete/{token}");
    if client
        .try_publish(topic.clone(), QoS::AtLeastOnce, false, Bytes::new())
        .is_err()
    {
        // the request channel is full: wait for room off the event loop
        let client = client.clone();
        tokio::spawn(async move {
            if client
                .publish(topic, QoS::AtLeastOnce, false, Bytes::new())
                .await
                .is_err()
            {
                SETTLE_FAILURES.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Connects device `index` of `ids`, subscribes, announces it and starts its task.
async fn connect_device(
    broker: Broker,
    ids: Arc<DeviceIds>,
    index: usize,
    recorder: Arc<Recorder>,
) -> anyhow::Result<(Device, Connected)> {
    let started = Instant::now();
    let device_id = ids.get(index).to_owned();
    let (client, mut eventloop) =
        AsyncClient::new(device_options(&broker, &unique_id(&device_id)), 16);
    let filter = format!("devices/{device_id}/messages/devicebound/#");
    let (ready_tx, ready) = oneshot::channel::<Result<Instant, String>>();
    let closing = Arc::new(AtomicBool::new(false));
    let events = {
        let (client, closing, filter, device_id) = (
            client.clone(),
            closing.clone(),
            filter.clone(),
            device_id.clone(),
        );
        tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut connections = 0u64;
            let mut failed_attempts = 0u32;
            loop {
                let event = eventloop.poll().await;
                let at = Instant::now();
                match event {
                    Ok(Event::Incoming(Packet::Publish(publish))) => {
                        let Some((message_id, token)) =
                            delivery_fields(publish.properties.as_ref())
                        else {
                            continue;
                        };
                        let kind = recorder.delivered(index, message_id, &publish.payload, at);
                        complete(&client, &device_id, token);
                        if kind == Some(Kind::Drain) {
                            recorder.drain_completed(index, Instant::now());
                        }
                    }
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        connections += 1;
                        if connections > 1 || failed_attempts > 0 {
                            // clean start lost the subscription, or a failed attempt lost
                            // the SUBSCRIBE: take it again
                            let _ = client.try_subscribe(filter.clone(), QoS::AtLeastOnce);
                        }
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(suback_result(&ack).map(|()| at));
                        }
                    }
                    Ok(_) => {}
                    Err(err) => {
                        // Before the first SUBACK a failure is a connection attempt that
                        // failed; after it, a connection lost.
                        let (counter, what) = if ready_tx.is_some() {
                            failed_attempts += 1;
                            if failed_attempts >= CONNECT_ATTEMPTS {
                                if let Some(tx) = ready_tx.take() {
                                    let _ = tx.send(Err(format!(
                                        "{err} (attempt {failed_attempts} of {CONNECT_ATTEMPTS})"
                                    )));
                                }
                                return;
                            }
                            (
                                &DEVICE_CONNECT_RETRIES,
                                format!("device {device_id} (connecting)"),
                            )
                        } else if closing.load(Ordering::Relaxed) {
                            return;
                        } else {
                            (&DEVICE_DISCONNECTS, format!("device {device_id}"))
                        };
                        warn_connection_lost(counter, &what, &err);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        })
    };
    let device = Device {
        client,
        closing,
        events,
    };
    device
        .client
        .subscribe(filter, QoS::AtLeastOnce)
        .await
        .map_err(|e| anyhow!("device {device_id}: subscribe: {e}"))?;
    let subscribed = match tokio::time::timeout(SUBSCRIBE_WAIT, ready).await {
        Ok(Ok(Ok(at))) => at,
        Ok(Ok(Err(err))) => bail!("device {device_id}: {err}"),
        Ok(Err(_)) => bail!("device {device_id}: event loop ended"),
        Err(_) => bail!("device {device_id}: no SUBACK within {SUBSCRIBE_WAIT:?}"),
    };
    device
        .client
        .publish(
            format!("devices/{device_id}/messages/events"),
            QoS::AtLeastOnce,
            false,
            Bytes::from_static(b"online"),
        )
        .await
        .map_err(|e| anyhow!("device {device_id}: announce: {e}"))?;
    Ok((
        device,
        Connected {
            started,
            subscribed,
        },
    ))
}

impl Fleet {
    /// Connects every device of `ids`, at most `concurrency` connecting at a time; returns the
    /// fleet and when each device (by index) started connecting and was subscribed.
    pub async fn connect(
        broker: &Broker,
        ids: &Arc<DeviceIds>,
        recorder: &Arc<Recorder>,
        concurrency: usize,
    ) -> anyhow::Result<(Fleet, Vec<Connected>)> {
        let attempts = (0..ids.len()).map(|index| {
            let (broker, ids, recorder) = (broker.clone(), ids.clone(), recorder.clone());
            async move { (index, connect_device(broker, ids, index, recorder).await) }
        });
        let mut results: Vec<(usize, anyhow::Result<(Device, Connected)>)> =
            futures::stream::iter(attempts)
                .buffer_unordered(concurrency.max(1))
                .collect()
                .await;
        results.sort_by_key(|(index, _)| *index);
        let mut devices = Vec::with_capacity(results.len());
        let mut times = Vec::with_capacity(results.len());
        let mut first_error = None;
        for (_, result) in results {
            match result {
                Ok((device, connected)) => {
                    devices.push(device);
                    times.push(connected);
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        let fleet = Fleet { devices };
        if let Some(err) = first_error {
            let connected = fleet.devices.len();
            fleet.disconnect().await;
            return Err(err.context(format!("{connected} of {} devices connected", ids.len())));
        }
        Ok((fleet, times))
    }

    /// Devices connected.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Sends DISCONNECT from every device, gives the event loops a moment to flush it, and
    /// stops them (clean start, no session expiry: the broker forgets the subscriptions).
    pub async fn disconnect(self) {
        for device in &self.devices {
            device.closing.store(true, Ordering::Relaxed);
            let _ = device.client.try_disconnect();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        for device in &self.devices {
            device.events.abort();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for device in &self.devices {
            device.events.abort();
        }
    }
}
