//! Space amplification of candidate state engines for the state store's write pattern
//! (issue 30, target 3). Same workload as `bench/sled-space`, engine chosen per run.
//!
//! Usage (one process per run, run sequentially):
//!   engine-space run engine=sled|fjall|redb dir=PATH [n=1000000] [passes=4] [idle=30]
//!                [batch=25000] [commit_every=10] [cache_mb=256] [label=NAME]
//!
//! Every measurement prints a line starting with "RESULT" (machine readable); other lines start
//! with "INFO". A durable commit is bracketed by two getppid() calls, so that
//! `strace -f -e trace=getppid,fsync,fdatasync,...` shows which sync calls belong to it.

use anyhow::{bail, ensure, Context, Result};
use redb::{ReadableDatabase, ReadableTable};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const KEY_LEN: usize = 16; // user key, without the b"k" prefix
const USER_VAL_LEN: usize = 64; // the user value inside the 87-byte record (logical bytes)
const REC_LEN: usize = 87; // the stored value (stand-in for the postcard Record)
const META_KEY: &[u8] = b"mapplied";

// ------------------------------------------------------------- workload ----

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D4_9BB1_33A1_11EB);
    z ^ (z >> 31)
}

fn store_key(i: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + KEY_LEN);
    k.push(b'k');
    k.extend_from_slice(format!("key-{:012}", i).as_bytes());
    debug_assert_eq!(k.len(), 1 + KEY_LEN);
    k
}

/// 87 incompressible bytes, deterministic per (key index, pass).
fn record(i: u64, pass: u64) -> Vec<u8> {
    let mut st = i.wrapping_mul(0xD6E8_FEB8_6659_FD93)
        ^ pass.wrapping_mul(0xA076_1D64_78BD_642F)
        ^ 0x1234_5678;
    let mut v = Vec::with_capacity(REC_LEN + 8);
    while v.len() < REC_LEN {
        v.extend_from_slice(&splitmix64(&mut st).to_le_bytes());
    }
    v.truncate(REC_LEN);
    v
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

// --------------------------------------------------------------- engines ----

/// What `Store::scan` calls for every row: key, value.
type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

trait Store {
    /// Writes the rows atomically; `durable` = the commit must be on disk (fsync) when it returns.
    fn write_batch(&mut self, rows: &[(Vec<u8>, Vec<u8>)], durable: bool) -> Result<()>;
    /// Durable flush of everything written so far.
    fn sync(&mut self) -> Result<()>;
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `f` for every row in key order; returns the row count.
    fn scan(&self, f: &mut RowVisitor<'_>) -> Result<u64>;
    /// The engine's explicit compaction / GC steps (measured one after another).
    fn compaction_steps(&self) -> Vec<&'static str>;
    fn compact(&mut self, step: &str) -> Result<String>;
    fn close(self: Box<Self>) -> Result<()>;
}

#[derive(Clone)]
struct Opts {
    engine: String,
    cache_bytes: usize,
}

fn open(dir: &Path, o: &Opts) -> Result<Box<dyn Store>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(match o.engine.as_str() {
        "sled" => Box::new(SledStore::open(dir, o)?),
        "fjall" => Box::new(FjallStore::open(dir, o)?),
        "redb" => Box::new(RedbStore::open(dir, o)?),
        e => bail!("unknown engine={e} (sled|fjall|redb)"),
    })
}

// sled 1.0.0-alpha.124 ------------------------------------------------------

struct SledStore {
    db: sled::Db,
}

impl SledStore {
    fn open(dir: &Path, o: &Opts) -> Result<Self> {
        // Defaults (flush_every_ms 200, zstd level 3, target_heap_file_fill_ratio 0.9) except
        // the cache, which is 256 MiB for every engine.
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity_bytes(o.cache_bytes)
            .open()
            .context("sled open")?;
        Ok(Self { db })
    }
}

impl Store for SledStore {
    fn write_batch(&mut self, rows: &[(Vec<u8>, Vec<u8>)], durable: bool) -> Result<()> {
        let mut b = sled::Batch::default();
        for (k, v) in rows {
            b.insert(k.as_slice(), v.as_slice());
        }
        self.db.apply_batch(b).context("sled apply_batch")?;
        if durable {
            self.sync()?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        marker();
        self.db.flush().context("sled flush")?;
        marker();
        Ok(())
    }
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(k).context("sled get")?.map(|v| v.to_vec()))
    }
    fn scan(&self, f: &mut RowVisitor<'_>) -> Result<u64> {
        let mut n = 0;
        for kv in self.db.iter() {
            let (k, v) = kv.context("sled iter")?;
            f(&k, &v)?;
            n += 1;
        }
        Ok(n)
    }
    fn compaction_steps(&self) -> Vec<&'static str> {
        vec![] // no explicit compaction API; GC (defrag) runs inside flush
    }
    fn compact(&mut self, step: &str) -> Result<String> {
        bail!("sled has no compaction step {step}")
    }
    fn close(self: Box<Self>) -> Result<()> {
        drop(self.db); // flushes on drop of the last handle
        Ok(())
    }
}

// fjall 3.1 ------------------------------------------------------------------

struct FjallStore {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl FjallStore {
    fn open(dir: &Path, o: &Opts) -> Result<Self> {
        // Defaults (leveled compaction, 64 MiB memtable, 512 MiB journal cap, lz4 blocks)
        // except the cache.
        let db = fjall::Database::builder(dir)
            .cache_size(o.cache_bytes as u64)
            .open()
            .context("fjall open")?;
        let ks = db
            .keyspace("state", fjall::KeyspaceCreateOptions::default)
            .context("fjall keyspace")?;
        Ok(Self { db, ks })
    }
}

impl Store for FjallStore {
    fn write_batch(&mut self, rows: &[(Vec<u8>, Vec<u8>)], durable: bool) -> Result<()> {
        let mut b = self.db.batch();
        for (k, v) in rows {
            b.insert(&self.ks, k.as_slice(), v.as_slice());
        }
        b.commit().context("fjall batch commit")?;
        if durable {
            self.sync()?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        marker();
        self.db
            .persist(fjall::PersistMode::SyncAll)
            .context("fjall persist")?;
        marker();
        Ok(())
    }
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.ks.get(k).context("fjall get")?.map(|v| v.to_vec()))
    }
    fn scan(&self, f: &mut RowVisitor<'_>) -> Result<u64> {
        let mut n = 0;
        for g in self.ks.iter() {
            let (k, v) = g.into_inner().context("fjall iter")?;
            f(&k, &v)?;
            n += 1;
        }
        Ok(n)
    }
    fn compaction_steps(&self) -> Vec<&'static str> {
        vec!["major_compact"]
    }
    fn compact(&mut self, step: &str) -> Result<String> {
        ensure!(step == "major_compact", "fjall has no step {step}");
        // Flush the active memtable first so the compaction sees every row, then compact all
        // tables into the last level.
        self.ks
            .rotate_memtable_and_wait()
            .context("fjall rotate_memtable_and_wait")?;
        self.ks.major_compact().context("fjall major_compact")?;
        self.sync()?;
        Ok(format!(
            "tables={} l0_tables={} journals={}",
            self.ks.table_count(),
            self.ks.l0_table_count(),
            self.db.journal_count()
        ))
    }
    fn close(self: Box<Self>) -> Result<()> {
        let Self { db, ks } = *self;
        drop(ks);
        drop(db); // joins the worker threads
        Ok(())
    }
}

// redb 5.0 --------------------------------------------------------------------

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("state");

struct RedbStore {
    db: redb::Database,
}

impl RedbStore {
    fn open(dir: &Path, o: &Opts) -> Result<Self> {
        let db = redb::Database::builder()
            .set_cache_size(o.cache_bytes)
            .create(dir.join("state.redb"))
            .context("redb create/open")?;
        Ok(Self { db })
    }
}

impl Store for RedbStore {
    fn write_batch(&mut self, rows: &[(Vec<u8>, Vec<u8>)], durable: bool) -> Result<()> {
        let mut tx = self.db.begin_write().context("redb begin_write")?;
        tx.set_durability(if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        })
        .context("redb set_durability")?;
        {
            let mut t = tx.open_table(TABLE).context("redb open_table")?;
            for (k, v) in rows {
                t.insert(k.as_slice(), v.as_slice())
                    .context("redb insert")?;
            }
        }
        if durable {
            marker();
        }
        tx.commit().context("redb commit")?;
        if durable {
            marker();
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        // An empty transaction with Durability::Immediate makes every earlier non-durable
        // commit durable.
        let tx = self.db.begin_write().context("redb begin_write")?;
        marker();
        tx.commit().context("redb commit")?;
        marker();
        Ok(())
    }
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        let tx = self.db.begin_read().context("redb begin_read")?;
        let t = tx.open_table(TABLE).context("redb open_table")?;
        let v = t.get(k).context("redb get")?.map(|g| g.value().to_vec());
        Ok(v)
    }
    fn scan(&self, f: &mut RowVisitor<'_>) -> Result<u64> {
        let tx = self.db.begin_read().context("redb begin_read")?;
        let t = tx.open_table(TABLE).context("redb open_table")?;
        let mut n = 0;
        for kv in t.iter().context("redb iter")? {
            let (k, v) = kv.context("redb iter")?;
            f(k.value(), v.value())?;
            n += 1;
        }
        Ok(n)
    }
    fn compaction_steps(&self) -> Vec<&'static str> {
        vec!["compact_balanced", "compact_maximum"]
    }
    fn compact(&mut self, step: &str) -> Result<String> {
        let mode = match step {
            "compact_balanced" => redb::CompactionMode::Balanced,
            "compact_maximum" => redb::CompactionMode::Maximum,
            s => bail!("redb has no step {s}"),
        };
        let mut rounds = 0;
        while self.db.compact(mode).context("redb compact")? {
            rounds += 1;
        }
        Ok(format!("compact() returned true {rounds} times"))
    }
    fn close(self: Box<Self>) -> Result<()> {
        drop(self.db);
        Ok(())
    }
}

/// Brackets a durable commit in strace output (getppid is otherwise unused here).
fn marker() {
    let _ = std::os::unix::process::parent_id();
}

// ----------------------------------------------------------- measurement ----

fn walk(p: &Path, files: &mut Vec<(PathBuf, u64, u64)>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for e in std::fs::read_dir(p).with_context(|| format!("read_dir {}", p.display()))? {
        let e = e?;
        let md = e.metadata()?;
        if md.is_dir() {
            walk(&e.path(), files)?;
        } else {
            files.push((e.path(), md.len(), md.blocks() * 512));
        }
    }
    Ok(())
}

fn du(flags: &[&str], dir: &Path) -> Result<u64> {
    let out = Command::new("du")
        .args(flags)
        .arg(dir)
        .output()
        .context("run du")?;
    ensure!(
        out.status.success(),
        "du {flags:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let first = s.split_whitespace().next().context("du printed nothing")?;
    Ok(first.parse()?)
}

fn proc_status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux >= 4.0), so each phase reports its own peak.
fn reset_hwm() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn proc_write_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or(0)
}

struct Ctx {
    label: String,
    engine: String,
    dir: PathBuf,
    n: u64,
    logical: u64,
}

fn measure(c: &Ctx, phase: &str) -> Result<()> {
    let mut files = vec![];
    walk(&c.dir, &mut files)?;
    let apparent: u64 = files.iter().map(|f| f.1).sum();
    let alloc_sum: u64 = files.iter().map(|f| f.2).sum();
    let du_sb = du(&["-sb"], &c.dir)?;
    let du_alloc = du(&["-s", "--block-size=1"], &c.dir)?;
    // apparent bytes per top-level entry of the engine's directory
    let mut parts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (p, len, _) in &files {
        let rel = p.strip_prefix(&c.dir)?;
        let top = rel
            .components()
            .next()
            .map(|x| x.as_os_str().to_string_lossy().to_string())
            .unwrap_or_default();
        let e = parts.entry(top).or_insert((0, 0));
        e.0 += 1;
        e.1 += len;
    }
    let parts_s: Vec<String> = parts
        .iter()
        .map(|(k, (cnt, b))| format!("{k}:{cnt}f:{b}"))
        .collect();
    println!(
        "RESULT label={} engine={} n={} phase={} du_sb={} apparent_sum={} du_alloc={} alloc_sum={} amp_du={:.3} amp_alloc={:.3} files={} parts={} rss_kb={} proc_write_bytes={}",
        c.label,
        c.engine,
        c.n,
        phase,
        du_sb,
        apparent,
        du_alloc,
        alloc_sum,
        du_sb as f64 / c.logical as f64,
        du_alloc as f64 / c.logical as f64,
        files.len(),
        parts_s.join(","),
        proc_status_kb("VmRSS:"),
        proc_write_bytes(),
    );
    Ok(())
}

/// Largest directory size (apparent, allocated) seen by the sampler since the last phase_info.
static PEAK_APPARENT: AtomicU64 = AtomicU64::new(0);
static PEAK_ALLOC: AtomicU64 = AtomicU64::new(0);

/// Samples the directory size every 250 ms for the life of the process (errors, e.g. a file
/// deleted during the walk, skip that sample).
fn start_sampler(dir: PathBuf) {
    std::thread::spawn(move || loop {
        let mut files = vec![];
        if dir.exists() && walk(&dir, &mut files).is_ok() {
            PEAK_APPARENT.fetch_max(files.iter().map(|f| f.1).sum(), Ordering::Relaxed);
            PEAK_ALLOC.fetch_max(files.iter().map(|f| f.2).sum(), Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(250));
    });
}

fn phase_info(c: &Ctx, phase: &str, t: Instant, keys: u64) {
    let secs = t.elapsed().as_secs_f64();
    let pa = PEAK_APPARENT.swap(0, Ordering::Relaxed);
    let pl = PEAK_ALLOC.swap(0, Ordering::Relaxed);
    println!(
        "INFO label={} engine={} phase={} secs={:.2} keys={} keys_per_s={:.0} peak_rss_kb={} peak_dir_apparent={} ({:.3}x) peak_dir_alloc={} ({:.3}x)",
        c.label,
        c.engine,
        phase,
        secs,
        keys,
        if keys > 0 { keys as f64 / secs } else { 0.0 },
        proc_status_kb("VmHWM:"),
        pa,
        pa as f64 / c.logical as f64,
        pl,
        pl as f64 / c.logical as f64,
    );
    reset_hwm();
}

// ------------------------------------------------------------------ runs ----

struct Counters {
    batches: u64,
    durable_commits: u64,
}

fn load_pass(
    s: &mut dyn Store,
    n: u64,
    pass: u64,
    batch: usize,
    commit_every: u64,
    cnt: &mut Counters,
) -> Result<()> {
    let order = shuffled(n, 0xC0FFEE + pass);
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(batch + 1);
    let chunks = order.chunks(batch).count() as u64;
    for (ci, chunk) in order.chunks(batch).enumerate() {
        rows.clear();
        for &i in chunk {
            rows.push((store_key(i), record(i, pass)));
        }
        cnt.batches += 1;
        rows.push((
            META_KEY.to_vec(),
            (cnt.batches * batch as u64).to_le_bytes().to_vec(),
        ));
        let last = ci as u64 + 1 == chunks;
        let durable = cnt.batches.is_multiple_of(commit_every) || last;
        s.write_batch(&rows, durable)?;
        if durable {
            cnt.durable_commits += 1;
        }
    }
    Ok(())
}

fn verify(c: &Ctx, s: &dyn Store, last_pass: u64) -> Result<String> {
    // every key present with its latest value, plus the meta row
    let mut expect_i = 0u64;
    let mut bad_values = 0u64;
    let mut unexpected = 0u64;
    let mut meta_seen = false;
    let rows = s.scan(&mut |k, v| {
        if k == META_KEY {
            meta_seen = v.len() == 8;
            return Ok(());
        }
        if k == store_key(expect_i).as_slice() {
            if v != record(expect_i, last_pass).as_slice() {
                bad_values += 1;
            }
            expect_i += 1;
        } else {
            unexpected += 1;
        }
        Ok(())
    })?;
    let mut st = 99u64;
    let mut sample_bad = 0u64;
    for _ in 0..1000 {
        let i = splitmix64(&mut st) % c.n;
        match s.get(&store_key(i))? {
            Some(v) if v == record(i, last_pass) => {}
            _ => sample_bad += 1,
        }
    }
    let ok = rows == c.n + 1
        && expect_i == c.n
        && bad_values == 0
        && unexpected == 0
        && meta_seen
        && sample_bad == 0;
    Ok(format!(
        "verify={} rows={} (expected {}) keys_in_order={} bad_values={} unexpected_keys={} meta_ok={} sampled_gets_bad={}/1000",
        if ok { "OK" } else { "FAILED" },
        rows,
        c.n + 1,
        expect_i,
        bad_values,
        unexpected,
        meta_seen,
        sample_bad
    ))
}

fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

fn reopen_close(c: &Ctx, o: &Opts, phase: &str) -> Result<()> {
    let t = Instant::now();
    let s = open(&c.dir, o)?;
    let open_secs = t.elapsed().as_secs_f64();
    s.close()?;
    settle();
    println!(
        "INFO label={} engine={} phase={} reopen_secs={:.2}",
        c.label, c.engine, phase, open_secs
    );
    measure(c, phase)
}

fn args() -> Result<HashMap<String, String>> {
    std::env::args()
        .skip(2)
        .map(|a| {
            let (k, v) = a
                .split_once('=')
                .with_context(|| format!("arg {a:?} must be key=value"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn num<T: std::str::FromStr>(a: &HashMap<String, String>, k: &str, d: T) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    match a.get(k) {
        Some(s) => s.parse().map_err(|e| anyhow::anyhow!("{k}={s}: {e}")),
        None => Ok(d),
    }
}

fn cmd_run() -> Result<()> {
    let a = args()?;
    let engine = a.get("engine").context("engine= is required")?.clone();
    let dir = PathBuf::from(a.get("dir").context("dir= is required")?);
    let n: u64 = num(&a, "n", 1_000_000)?;
    let passes: u64 = num(&a, "passes", 4)?; // overwrite passes after the load
    let idle: u64 = num(&a, "idle", 30)?;
    let batch: usize = num(&a, "batch", 25_000)?;
    let commit_every: u64 = num(&a, "commit_every", 10)?;
    let cache_mb: usize = num(&a, "cache_mb", 256)?;
    let label = a.get("label").cloned().unwrap_or_else(|| engine.clone());
    let o = Opts {
        engine: engine.clone(),
        cache_bytes: cache_mb << 20,
    };
    let c = Ctx {
        label,
        engine,
        dir,
        n,
        logical: n * (KEY_LEN + USER_VAL_LEN) as u64,
    };
    if c.dir.exists() {
        std::fs::remove_dir_all(&c.dir)?;
    }
    println!(
        "INFO label={} engine={} n={} passes={} idle={} batch={} commit_every={} cache_mb={} logical={}",
        c.label, c.engine, n, passes, idle, batch, commit_every, cache_mb, c.logical
    );
    let mut cnt = Counters {
        batches: 0,
        durable_commits: 0,
    };
    reset_hwm();
    start_sampler(c.dir.clone());

    // (a) load
    let t = Instant::now();
    let mut s = open(&c.dir, &o)?;
    load_pass(s.as_mut(), n, 0, batch, commit_every, &mut cnt)?;
    s.sync()?;
    phase_info(&c, "load", t, n);
    measure(&c, "a_open")?;
    s.close()?;
    settle();
    measure(&c, "a_closed")?;

    // (b) reopen + close
    let t = Instant::now();
    reopen_close(&c, &o, "b")?;
    phase_info(&c, "b", t, 0);

    // (c), (d): overwrite passes
    let mut s = if passes > 0 {
        Some(open(&c.dir, &o)?)
    } else {
        None
    };
    for pass in 1..=passes {
        let Some(st) = s.as_mut() else { break };
        let t = Instant::now();
        load_pass(st.as_mut(), n, pass, batch, commit_every, &mut cnt)?;
        st.sync()?;
        phase_info(&c, &format!("pass{pass}"), t, n);
        measure(&c, &format!("pass{pass}_open"))?;
        if pass == 1 || pass == passes {
            if let Some(st) = s.take() {
                st.close()?;
            }
            settle();
            measure(&c, &format!("pass{pass}_closed"))?;
            let t = Instant::now();
            reopen_close(&c, &o, if pass == 1 { "c" } else { "d" })?;
            phase_info(&c, "reopen", t, 0);
            if pass < passes {
                s = Some(open(&c.dir, &o)?);
            }
        }
    }

    // (d') idle, then the engine's explicit compaction, if any
    if passes > 0 {
        let t = Instant::now();
        let mut s = open(&c.dir, &o)?;
        if idle > 0 {
            std::thread::sleep(Duration::from_secs(idle));
            s.sync()?;
            measure(&c, "d_idle_open")?;
        }
        for step in s.compaction_steps() {
            let ts = Instant::now();
            let info = s.compact(step)?;
            println!(
                "INFO label={} engine={} phase=d_{} secs={:.2} {}",
                c.label,
                c.engine,
                step,
                ts.elapsed().as_secs_f64(),
                info
            );
            measure(&c, &format!("d_{step}_open"))?;
        }
        s.close()?;
        settle();
        measure(&c, "d_after_closed")?;
        reopen_close(&c, &o, "d_after")?;
        phase_info(&c, "d_after", t, 0);
    }

    // verification
    let t = Instant::now();
    let s = open(&c.dir, &o)?;
    let v = verify(&c, s.as_ref(), passes)?;
    s.close()?;
    phase_info(&c, "verify", t, n);
    println!(
        "INFO label={} engine={} {} batches={} durable_commits={}",
        c.label, c.engine, v, cnt.batches, cnt.durable_commits
    );
    Ok(())
}

fn main() -> Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("run") => cmd_run(),
        _ => {
            eprintln!("usage: engine-space run engine=sled|fjall|redb dir=PATH [n=] [passes=] [idle=] [batch=] [commit_every=] [cache_mb=] [label=]");
            std::process::exit(2);
        }
    }
}
