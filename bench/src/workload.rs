//! What a load cell does: the operation mixes, the `MIX:CLIENTSxIN_FLIGHT` workload spec, the
//! fixed-width keys and values, and the small deterministic generator that picks keys and
//! operations (no global RNG, so every connection's sequence is reproducible).

use std::fmt;
use std::str::FromStr;

use anyhow::{Context, bail};
use clap::ValueEnum;
use serde::Serialize;

/// Expiry used by `SET ... NX PX` requests, in milliseconds.
pub const PX_MS: u64 = 10_000;

/// Key length in bytes (`key-` plus 12 digits).
pub const KEY_LEN: usize = 16;

/// One request kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    /// `SET key value`.
    Set,
    /// `GET key`.
    Get,
    /// `DEL key`.
    Del,
    /// `SET key value NX PX 10000`.
    SetNxPx,
}

/// A mix of operations, chosen with `--mix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    /// Only `SET`.
    Set,
    /// Only `GET` (keys are loaded first).
    Get,
    /// Only `DEL`.
    Del,
    /// Only `SET NX PX`.
    Setnx,
    /// 50 % GET, 30 % SET, 10 % DEL, 10 % SET NX PX.
    Mixed,
}

impl Mix {
    /// The operation for a uniformly random `r`.
    pub fn pick(self, r: u64) -> Op {
        match self {
            Mix::Set => Op::Set,
            Mix::Get => Op::Get,
            Mix::Del => Op::Del,
            Mix::Setnx => Op::SetNxPx,
            Mix::Mixed => match r % 10 {
                0..=4 => Op::Get,
                5..=7 => Op::Set,
                8 => Op::Del,
                _ => Op::SetNxPx,
            },
        }
    }

    /// Whether the cell reads or deletes keys, so they should exist beforehand.
    pub fn needs_preload(self) -> bool {
        matches!(self, Mix::Get | Mix::Del | Mix::Mixed)
    }

    /// Name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Mix::Set => "SET",
            Mix::Get => "GET",
            Mix::Del => "DEL",
            Mix::Setnx => "SET NX PX",
            Mix::Mixed => "MIXED",
        }
    }
}

/// One workload: a mix at `clients` connections with `in_flight` requests outstanding each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkloadSpec {
    /// Operation mix.
    pub mix: Mix,
    /// Connections.
    pub clients: usize,
    /// Requests outstanding per connection.
    pub in_flight: usize,
}

impl WorkloadSpec {
    /// `64×8`.
    pub fn concurrency(&self) -> String {
        format!("{}×{}", self.clients, self.in_flight)
    }
}

impl fmt::Display for WorkloadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.mix.label(), self.concurrency())
    }
}

impl FromStr for WorkloadSpec {
    type Err = anyhow::Error;

    /// `set:64x8`, `mixed:1x1`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (mix, shape) = s
            .split_once(':')
            .with_context(|| format!("workload `{s}`: expected MIX:CLIENTSxIN_FLIGHT"))?;
        let mix = Mix::from_str(mix, true).map_err(|e| anyhow::anyhow!("workload `{s}`: {e}"))?;
        let (clients, in_flight) = shape
            .split_once(['x', '×'])
            .with_context(|| format!("workload `{s}`: expected CLIENTSxIN_FLIGHT after `:`"))?;
        let clients: usize = clients
            .parse()
            .with_context(|| format!("workload `{s}`: clients"))?;
        let in_flight: usize = in_flight
            .parse()
            .with_context(|| format!("workload `{s}`: in-flight"))?;
        if clients == 0 || in_flight == 0 {
            bail!("workload `{s}`: clients and in-flight must be at least 1");
        }
        Ok(WorkloadSpec {
            mix,
            clients,
            in_flight,
        })
    }
}

/// The 16-byte key number `index`: `key-000000000042`.
pub fn key(index: u64) -> Vec<u8> {
    format!("key-{:012}", index % 1_000_000_000_000).into_bytes()
}

/// The number of a key made by [`key`] (`key-000000000042` → 42); `None` for anything else.
pub fn key_index(key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(b"key-")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A printable value of `size` bytes.
pub fn value(size: usize) -> bytes::Bytes {
    (0..size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// What the values of a load look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueKind {
    /// The same printable value for every key ([`value`]): what every figure before 2026-12-06
    /// used; any compressing store shrinks it to almost nothing.
    Pattern,
    /// Bytes drawn from the key's own generator: different for every key and incompressible.
    Random,
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueKind::Pattern => "pattern",
            ValueKind::Random => "random",
        })
    }
}

/// The value written to each key of a load.
#[derive(Debug, Clone)]
pub enum Values {
    /// One value for every key.
    Same(bytes::Bytes),
    /// `size` bytes that depend on the key only (the same key gets the same bytes every time).
    PerKey {
        /// Value size, bytes.
        size: usize,
    },
}

impl Values {
    /// Values of `kind` and `size` bytes.
    pub fn new(kind: ValueKind, size: usize) -> Values {
        match kind {
            ValueKind::Pattern => Values::Same(value(size)),
            ValueKind::Random => Values::PerKey { size },
        }
    }

    /// The value for `key`.
    pub fn for_key(&self, key: &[u8]) -> bytes::Bytes {
        match self {
            Values::Same(value) => value.clone(),
            Values::PerKey { size } => {
                let seed = key.iter().fold(0xCBF2_9CE4_8422_2325_u64, |hash, byte| {
                    (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01B3)
                });
                let mut rng = Rng::new(seed);
                let mut bytes = Vec::with_capacity(*size + 8);
                while bytes.len() < *size {
                    bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                bytes.truncate(*size);
                bytes.into()
            }
        }
    }
}

/// splitmix64: tiny, fast, good enough to pick keys and operations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for stream `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_values_are_the_keys_own_and_of_the_asked_size() {
        for size in [0, 1, 7, 8, 63, 64, 65, 4096] {
            let values = Values::new(ValueKind::Random, size);
            let first = values.for_key(&key(1));
            assert_eq!(first.len(), size);
            assert_eq!(
                values.for_key(&key(1)),
                first,
                "the same key, the same value"
            );
            if size >= 8 {
                assert_ne!(values.for_key(&key(2)), first, "another key, another value");
            }
        }
    }

    #[test]
    fn pattern_values_are_one_value_for_every_key() {
        let values = Values::new(ValueKind::Pattern, 64);
        assert_eq!(values.for_key(&key(1)), value(64));
        assert_eq!(values.for_key(&key(2)), value(64));
    }

    #[test]
    fn random_values_use_every_byte_value() {
        let values = Values::new(ValueKind::Random, 64);
        let mut seen = [false; 256];
        for index in 0..1_000 {
            for byte in values.for_key(&key(index)).iter() {
                seen[usize::from(*byte)] = true;
            }
        }
        assert!(
            seen.iter().all(|s| *s),
            "64,000 bytes should cover all 256 byte values"
        );
    }

    #[test]
    fn keys_are_sixteen_bytes() {
        assert_eq!(key(0), b"key-000000000000");
        assert_eq!(key(999_999).len(), KEY_LEN);
        assert_eq!(key(u64::MAX).len(), KEY_LEN);
    }

    #[test]
    fn key_numbers_round_trip() {
        for (key, index) in [
            (&b"key-000000000000"[..], Some(0)),
            (b"key-000000000042", Some(42)),
            (b"key-999999999999", Some(999_999_999_999)),
            (b"key-", None),
            (b"key-12a", None),
            (b"kez-000000000001", None),
            (b"", None),
        ] {
            assert_eq!(key_index(key), index, "{}", String::from_utf8_lossy(key));
        }
        assert_eq!(key_index(&key(1234)), Some(1234));
    }

    #[test]
    fn values_have_the_requested_size() {
        assert_eq!(value(0).len(), 0);
        assert_eq!(&value(3)[..], b"abc");
        assert_eq!(value(64).len(), 64);
    }

    #[test]
    fn workload_specs_parse() {
        let spec: WorkloadSpec = "set:64x8".parse().expect("valid");
        assert_eq!(
            spec,
            WorkloadSpec {
                mix: Mix::Set,
                clients: 64,
                in_flight: 8
            }
        );
        assert_eq!(spec.to_string(), "SET 64×8");
        let spec: WorkloadSpec = "MIXED:1×1".parse().expect("valid");
        assert_eq!(spec.mix, Mix::Mixed);
        assert!("set".parse::<WorkloadSpec>().is_err());
        assert!("set:0x1".parse::<WorkloadSpec>().is_err());
        assert!("nope:1x1".parse::<WorkloadSpec>().is_err());
        assert!("get:axb".parse::<WorkloadSpec>().is_err());
    }

    #[test]
    fn mixed_covers_every_operation_in_proportion() {
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 4];
        for _ in 0..10_000 {
            let i = match Mix::Mixed.pick(rng.next_u64()) {
                Op::Get => 0,
                Op::Set => 1,
                Op::Del => 2,
                Op::SetNxPx => 3,
            };
            counts[i] += 1;
        }
        assert!((4_500..5_500).contains(&counts[0]), "{counts:?}");
        assert!((2_500..3_500).contains(&counts[1]), "{counts:?}");
        assert!((700..1_300).contains(&counts[2]), "{counts:?}");
        assert!((700..1_300).contains(&counts[3]), "{counts:?}");
        assert_eq!(Mix::Get.pick(3), Op::Get);
    }
}
