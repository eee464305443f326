//! sled 0.34.7 space-amplification experiment.
//!
//! Usage (one process per configuration, run sequentially):
//!   sled-space run     dir=PATH n=N values=pattern|random order=random|sorted
//!                   [compression=0|1..22] [segment=BYTES] [idle=SECS] label=NAME
//!   sled-space rebuild src=PATH dst=PATH mode=import|batch [compression=..] [segment=..] label=NAME
//!
//! Every measurement prints a line starting with "RESULT" (machine readable).

mod snapinfo;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- record ----

#[derive(Serialize)]
struct Hlc {
    ms: u64,
    counter: u64,
    node: String,
}

#[derive(Serialize)]
struct Record {
    value: Vec<u8>,
    version: Hlc,
    expires_at_ms: Option<u64>,
    fencing_token: Option<Hlc>,
}

const KEY_LEN: usize = 16;
const VAL_LEN: usize = 64;
const BATCH: usize = 25_000;
const FLUSH_EVERY_BATCHES: usize = 10;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D4_9BB1_33A1_11EB);
    z ^ (z >> 31)
}

fn user_key(i: u64) -> Vec<u8> {
    let k = format!("key-{:012}", i);
    assert_eq!(k.len(), KEY_LEN);
    let mut sk = Vec::with_capacity(1 + KEY_LEN);
    sk.push(b'k');
    sk.extend_from_slice(k.as_bytes());
    sk
}

fn value_bytes(i: u64, pass: u64, random: bool) -> Vec<u8> {
    if random {
        let mut st = i.wrapping_mul(0xD6E8_FEB8_6659_FD93)
            ^ pass.wrapping_mul(0xA076_1D64_78BD_642F)
            ^ 0x1234_5678;
        let mut v = Vec::with_capacity(VAL_LEN);
        for _ in 0..VAL_LEN / 8 {
            v.extend_from_slice(&splitmix64(&mut st).to_le_bytes());
        }
        v
    } else {
        vec![b'a' + ((i + pass) % 26) as u8; VAL_LEN]
    }
}

fn encode_record(i: u64, pass: u64, random: bool, seq: u64) -> Vec<u8> {
    let rec = Record {
        value: value_bytes(i, pass, random),
        version: Hlc {
            // ~1.8e12 ms, advancing by 1 ms every 250 writes
            ms: 1_800_000_000_000 + seq / 250,
            counter: seq % 100,
            node: "statestore-1".to_string(),
        },
        expires_at_ms: None,
        fencing_token: None,
    };
    postcard::to_allocvec(&rec).unwrap()
}

fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut st = seed;
    for i in (1..v.len()).rev() {
        let j = (splitmix64(&mut st) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

// ---------------------------------------------------------------- config ----

#[derive(Clone)]
struct Cfg {
    compression: i32, // 0 = off
    segment: Option<usize>,
    flush_ms: u64, // default 1000 (the team's setting); diagnostic knob only
}

fn open(dir: &Path, c: &Cfg) -> sled::Db {
    let mut cfg = sled::Config::new()
        .path(dir)
        .cache_capacity(256 << 20)
        .flush_every_ms(Some(c.flush_ms))
        .mode(sled::Mode::HighThroughput);
    if c.compression > 0 {
        cfg = cfg.use_compression(true).compression_factor(c.compression);
    }
    if let Some(s) = c.segment {
        cfg = cfg.segment_size(s);
    }
    cfg.open().expect("open")
}

// ----------------------------------------------------------- measurement ----

fn walk(p: &Path, files: &mut Vec<(PathBuf, u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        if md.is_dir() {
            walk(&e.path(), files);
        } else {
            files.push((e.path(), md.len(), md.blocks() * 512));
        }
    }
}

fn du(flag: &str, dir: &Path) -> u64 {
    let out = Command::new("du").arg(flag).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn vm_hwm_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    for l in s.lines() {
        if let Some(r) = l.strip_prefix("VmHWM:") {
            return r.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    0
}

fn proc_write_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    for l in s.lines() {
        if let Some(r) = l.strip_prefix("write_bytes:") {
            return r.trim().parse().unwrap_or(0);
        }
    }
    0
}

fn measure(label: &str, phase: &str, dir: &Path, logical: u64, db: Option<&sled::Db>) {
    let mut files = vec![];
    walk(dir, &mut files);
    files.sort();
    let sum: u64 = files.iter().map(|f| f.1).sum();
    let alloc: u64 = files.iter().map(|f| f.2).sum();
    let du_sb = du("-sb", dir);
    let du_alloc = du("-sB1", dir);
    let mut parts: HashMap<&str, (u64, u64)> = HashMap::new();
    for (p, len, _) in &files {
        let name = p.strip_prefix(dir).unwrap().to_string_lossy().to_string();
        let class = if name == "db" {
            "db"
        } else if name == "conf" {
            "conf"
        } else if name.starts_with("snap.") {
            "snap"
        } else if name.starts_with("blobs") {
            "blobs"
        } else {
            "other"
        };
        let e = parts.entry(class).or_insert((0, 0));
        e.0 += 1;
        e.1 += len;
    }
    let g = |k: &str| parts.get(k).copied().unwrap_or((0, 0));
    let sod = db.map(|d| d.size_on_disk().unwrap() as i64).unwrap_or(-1);
    println!(
        "RESULT label={} phase={} du_sb={} files_sum={} alloc={} du_alloc={} amp_du={:.3} amp_files={:.3} \
         db={} snap={} snap_files={} blobs={} blob_files={} conf={} other={} size_on_disk={} per_key_extra_du={:.1} hwm_kb={} proc_write_bytes={}",
        label,
        phase,
        du_sb,
        sum,
        alloc,
        du_alloc,
        du_sb as f64 / logical as f64,
        sum as f64 / logical as f64,
        g("db").1,
        g("snap").1,
        g("snap").0,
        g("blobs").1,
        g("blobs").0,
        g("conf").1,
        g("other").1,
        sod,
        (du_sb as f64 - logical as f64) / (logical as f64 / (KEY_LEN + VAL_LEN) as f64),
        vm_hwm_kb(),
        proc_write_bytes()
    );
}

// ------------------------------------------------------------------ load ----

struct LoadStats {
    secs: f64,
    bytes_payload: u64,
}

#[allow(clippy::too_many_arguments)] // one call site per pass; a struct would only rename them
fn load_pass(
    db: &sled::Db,
    n: u64,
    pass: u64,
    random_vals: bool,
    sorted: bool,
    seq: &mut u64,
    batch_counter: &mut u64,
    rate: f64, // inserts/s target; 0 = as fast as possible
) -> LoadStats {
    let order: Vec<u64> = if sorted {
        (0..n).collect()
    } else {
        shuffled(n, 0xC0FFEE + pass)
    };
    let t = Instant::now();
    let mut payload = 0u64;
    let mut batches = 0usize;
    for chunk in order.chunks(BATCH) {
        if rate > 0.0 {
            let due = Duration::from_secs_f64((batches * BATCH) as f64 / rate);
            if let Some(wait) = due.checked_sub(t.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let mut b = sled::Batch::default();
        for &i in chunk {
            let v = encode_record(i, pass, random_vals, *seq);
            *seq += 1;
            let k = user_key(i);
            payload += (k.len() + v.len()) as u64;
            b.insert(k, v);
        }
        *batch_counter += 1;
        // small meta row (applied index / term), updated every batch
        let meta = postcard::to_allocvec(&(*batch_counter * BATCH as u64, 7u64)).unwrap();
        b.insert(&b"mapplied"[..], meta);
        db.apply_batch(b).expect("apply_batch");
        batches += 1;
        if batches.is_multiple_of(FLUSH_EVERY_BATCHES) {
            db.flush().expect("flush");
        }
    }
    db.flush().expect("final flush");
    LoadStats {
        secs: t.elapsed().as_secs_f64(),
        bytes_payload: payload,
    }
}

fn settle() {
    // let background truncation threads finish after a drop
    std::thread::sleep(Duration::from_millis(300));
}

fn reopen_cycle(label: &str, phase: &str, dir: &Path, c: &Cfg, logical: u64, idle: u64) {
    let t = Instant::now();
    let db = open(dir, c);
    let open_secs = t.elapsed().as_secs_f64();
    if idle > 0 {
        std::thread::sleep(Duration::from_secs(idle));
    }
    db.flush().unwrap();
    measure(label, &format!("{}_open", phase), dir, logical, Some(&db));
    drop(db);
    settle();
    println!(
        "INFO label={} phase={} reopen_secs={:.2} idle={}",
        label, phase, open_secs, idle
    );
    measure(label, phase, dir, logical, None);
}

fn verify(dir: &Path, c: &Cfg, n: u64, pass: u64, random_vals: bool) {
    let db = open(dir, c);
    let cnt = db.iter().count() as u64;
    assert_eq!(cnt, n + 1, "key count mismatch");
    let mut st = 99u64;
    for _ in 0..1000 {
        let i = splitmix64(&mut st) % n;
        let v = db.get(user_key(i)).unwrap().expect("missing key");
        assert_eq!(v.len(), 87, "record length");
        assert_eq!(
            &v[1..1 + VAL_LEN],
            &value_bytes(i, pass, random_vals)[..],
            "value mismatch"
        );
    }
    println!(
        "INFO verify ok: {} keys (+1 meta), 1000 sampled values match pass {}",
        n, pass
    );
}

fn args() -> HashMap<String, String> {
    std::env::args()
        .skip(2)
        .map(|a| {
            let (k, v) = a.split_once('=').expect("arg must be key=value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn cfg_from(a: &HashMap<String, String>) -> Cfg {
    Cfg {
        compression: a
            .get("compression")
            .map(|s| s.parse().unwrap())
            .unwrap_or(0),
        segment: a.get("segment").map(|s| s.parse().unwrap()),
        flush_ms: a
            .get("flush_ms")
            .map(|s| s.parse().unwrap())
            .unwrap_or(1000),
    }
}

fn cmd_run() {
    let a = args();
    let dir = PathBuf::from(&a["dir"]);
    let n: u64 = a["n"].parse().unwrap();
    let random_vals = match a["values"].as_str() {
        "random" => true,
        "pattern" => false,
        x => panic!("values={}", x),
    };
    let sorted = a.get("order").map(|s| s == "sorted").unwrap_or(false);
    let rate: f64 = a.get("rate").map(|s| s.parse().unwrap()).unwrap_or(0.0);
    let idle: u64 = a.get("idle").map(|s| s.parse().unwrap()).unwrap_or(0);
    let label = a.get("label").cloned().unwrap_or_else(|| "x".into());
    let c = cfg_from(&a);
    let logical = n * (KEY_LEN + VAL_LEN) as u64;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!(
        "INFO label={} n={} values={} order={} compression={} segment={:?} flush_ms={} rate={} logical={}",
        label,
        n,
        a["values"],
        if sorted { "sorted" } else { "random" },
        c.compression,
        c.segment,
        c.flush_ms,
        rate,
        logical
    );

    let mut seq = 0u64;
    let mut bc = 0u64;

    // (a) load
    let db = open(&dir, &c);
    let s = load_pass(&db, n, 0, random_vals, sorted, &mut seq, &mut bc, rate);
    println!(
        "INFO label={} phase=load secs={:.2} rate={:.0}/s sled_payload_bytes={} ({:.2} B/key, {:.3}x logical)",
        label,
        s.secs,
        n as f64 / s.secs,
        s.bytes_payload,
        s.bytes_payload as f64 / n as f64,
        s.bytes_payload as f64 / logical as f64
    );
    measure(&label, "a", &dir, logical, Some(&db));
    drop(db);
    settle();
    measure(&label, "a_dropped", &dir, logical, None);

    // (b) reopen, flush, drop
    reopen_cycle(&label, "b", &dir, &c, logical, 0);
    if idle > 0 {
        reopen_cycle(&label, "b_idle", &dir, &c, logical, idle);
    }

    // (c) overwrite every key once (passes-1 times), then reopen
    let passes: u64 = a.get("passes").map(|s| s.parse().unwrap()).unwrap_or(2);
    let db = open(&dir, &c);
    for pass in 1..passes {
        let s = load_pass(&db, n, pass, random_vals, sorted, &mut seq, &mut bc, rate);
        println!(
            "INFO label={} phase=overwrite pass={} secs={:.2} rate={:.0}/s",
            label,
            pass,
            s.secs,
            n as f64 / s.secs
        );
        if pass + 1 < passes {
            measure(&label, &format!("pass{}", pass), &dir, logical, Some(&db));
        }
    }
    measure(&label, "c_before_reopen", &dir, logical, Some(&db));
    drop(db);
    settle();
    reopen_cycle(&label, "c", &dir, &c, logical, 0);
    if idle > 0 {
        reopen_cycle(&label, "c_idle", &dir, &c, logical, idle);
    }
    verify(&dir, &c, n, passes - 1, random_vals);
    println!("INFO label={} peak_rss_kb={}", label, vm_hwm_kb());
}

fn cmd_rebuild() {
    let a = args();
    let src = PathBuf::from(&a["src"]);
    let dst = PathBuf::from(&a["dst"]);
    let n: u64 = a["n"].parse().unwrap();
    let mode = a.get("mode").cloned().unwrap_or_else(|| "import".into());
    let label = a.get("label").cloned().unwrap_or_else(|| "rebuild".into());
    let c = cfg_from(&a);
    let logical = n * (KEY_LEN + VAL_LEN) as u64;
    if dst.exists() {
        std::fs::remove_dir_all(&dst).unwrap();
    }
    let sdb = open(&src, &c);
    let ddb = open(&dst, &c);
    let t = Instant::now();
    match mode.as_str() {
        "import" => ddb.import(sdb.export()),
        "batch" => {
            let mut b = sled::Batch::default();
            let mut cnt = 0usize;
            let mut batches = 0usize;
            for kv in sdb.iter() {
                let (k, v) = kv.unwrap();
                b.insert(k, v);
                cnt += 1;
                if cnt == BATCH {
                    ddb.apply_batch(std::mem::take(&mut b)).unwrap();
                    cnt = 0;
                    batches += 1;
                    if batches.is_multiple_of(FLUSH_EVERY_BATCHES) {
                        ddb.flush().unwrap();
                    }
                }
            }
            ddb.apply_batch(b).unwrap();
        }
        x => panic!("mode={}", x),
    }
    ddb.flush().unwrap();
    println!(
        "INFO label={} phase=rebuild mode={} secs={:.2}",
        label,
        mode,
        t.elapsed().as_secs_f64()
    );
    assert_eq!(ddb.len(), sdb.len());
    drop(sdb);
    measure(&label, "a", &dst, logical, Some(&ddb));
    drop(ddb);
    settle();
    measure(&label, "a_dropped", &dst, logical, None);
    reopen_cycle(&label, "b", &dst, &c, logical, 0);
    println!("INFO label={} peak_rss_kb={}", label, vm_hwm_kb());
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("run") => cmd_run(),
        Some("rebuild") => cmd_rebuild(),
        Some("snapinfo") => {
            let a = args();
            let seg = a
                .get("segment")
                .map(|s| s.parse().unwrap())
                .unwrap_or(512 * 1024);
            let comp = a.get("compression").map(|s| s != "0").unwrap_or(false);
            snapinfo::run(Path::new(&a["dir"]), seg, comp)
        }
        _ => {
            eprintln!("usage: sled-space run|rebuild key=value...");
            std::process::exit(2);
        }
    }
}
