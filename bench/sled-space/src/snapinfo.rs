//! Offline decomposition of a *closed* sled 0.34.7 directory using its latest
//! snap.* file (page table: every live base/fragment location and on-log size)
//! plus the base node of every page read back from the `db` file.
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn varint(buf: &mut &[u8]) -> u64 {
    // sled's custom varint (serialization.rs, impl Serialize for u64)
    let b0 = buf[0];
    let (res, n) = match b0 {
        0..=240 => (b0 as u64, 1),
        241..=248 => (240 + 256 * (b0 as u64 - 241) + buf[1] as u64, 2),
        249 => (2288 + 256 * buf[1] as u64 + buf[2] as u64, 3),
        other => {
            let sz = other as usize - 247;
            let mut a = [0u8; 8];
            a[..sz].copy_from_slice(&buf[1..=sz]);
            (u64::from_le_bytes(a), sz + 1)
        }
    };
    *buf = &buf[n..];
    res
}
fn i64le(buf: &mut &[u8]) -> i64 {
    let v = i64::from_le_bytes(buf[..8].try_into().unwrap());
    *buf = &buf[8..];
    v
}
fn u8b(buf: &mut &[u8]) -> u8 {
    let v = buf[0];
    *buf = &buf[1..];
    v
}
fn ivec<'a>(buf: &mut &'a [u8]) -> &'a [u8] {
    let l = varint(buf) as usize;
    let r = &buf[..l];
    *buf = &buf[l..];
    r
}

#[derive(Clone, Copy, Debug)]
struct Loc {
    lid: u64,
    blob: bool,
    size: u64,
}
fn diskptr_tuple(buf: &mut &[u8]) -> Loc {
    let _lsn = i64le(buf);
    let disc = u8b(buf);
    let lid = varint(buf);
    let blob = disc == 1;
    if blob {
        let _ = i64le(buf);
    }
    let size = varint(buf);
    Loc { lid, blob, size }
}

pub fn run(dir: &Path, segment: u64, compressed: bool) {
    let mut snaps: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().to_string();
            if n.starts_with("snap.") && !n.ends_with(".generating") {
                Some(n)
            } else {
                None
            }
        })
        .collect();
    snaps.sort();
    let snap = snaps
        .last()
        .expect("no snapshot file (open+close the db once)");
    let mut raw = vec![];
    std::fs::File::open(dir.join(snap))
        .unwrap()
        .read_to_end(&mut raw)
        .unwrap();
    let n = raw.len();
    let dec_len = u64::from_le_bytes(raw[n - 12..n - 4].try_into().unwrap()) as usize;
    raw.truncate(n - 12);
    let body = if compressed {
        zstd::block::decompress(&raw, dec_len).unwrap()
    } else {
        raw
    };
    let mut b: &[u8] = &body;
    let _stable_lsn = i64le(&mut b);
    let _active = varint(&mut b);
    let mut pages: Vec<(u64, Loc, Vec<Loc>)> = vec![];
    let mut free_pages = 0u64;
    let mut pid = 0u64;
    while !b.is_empty() {
        let d = u8b(&mut b);
        if d == 0 {
            let _ = i64le(&mut b);
            let disc = u8b(&mut b);
            let _ = varint(&mut b);
            if disc == 1 {
                let _ = i64le(&mut b);
            }
            free_pages += 1;
        } else {
            let base = diskptr_tuple(&mut b);
            let frags = (0..d - 1).map(|_| diskptr_tuple(&mut b)).collect();
            pages.push((pid, base, frags));
        }
        pid += 1;
    }
    let db = std::fs::File::open(dir.join("db")).unwrap();
    let file_len = db.metadata().unwrap().len();
    let nseg = file_len.div_ceil(segment);
    let mut live_per_seg: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut base_bytes, mut frag_bytes, mut nfrags) = (0u64, 0u64, 0u64);
    let (mut leaf_pages, mut index_pages, mut leaf_keys) = (0u64, 0u64, 0u64);
    let (mut leaf_base_bytes, mut leaf_frag_bytes, mut leaf_frags) = (0u64, 0u64, 0u64);
    let (mut key_suffix_bytes, mut val_bytes, mut prefix_sum, mut lohi_bytes) =
        (0u64, 0u64, 0u64, 0u64);
    let mut fill_hist = [0u64; 18];
    for (pid, base, frags) in &pages {
        for l in std::iter::once(base).chain(frags.iter()) {
            *live_per_seg.entry(l.lid / segment).or_default() += l.size;
        }
        base_bytes += base.size;
        nfrags += frags.len() as u64;
        let fb: u64 = frags.iter().map(|f| f.size).sum();
        frag_bytes += fb;
        if *pid < 2 || base.blob {
            continue; // meta / counter pages
        }
        // read base node: message header (crc u32, kind u8, len, segno, pid)
        let mut hdr = vec![0u8; 64];
        let _ = db.read_at(&mut hdr, base.lid).unwrap();
        let mut h: &[u8] = &hdr[4..];
        let kind = u8b(&mut h);
        let len = varint(&mut h) as usize;
        let _segno = varint(&mut h);
        let _pid = varint(&mut h);
        let off = 64 - h.len();
        if kind != 8 {
            continue; // not InlineNode
        }
        let mut msg = vec![0u8; len];
        db.read_exact_at(&mut msg, base.lid + off as u64).unwrap();
        let node_bytes = if compressed {
            let mut m: &[u8] = &msg;
            let _ = varint(&mut m);
            zstd::stream::decode_all(m).unwrap()
        } else {
            msg
        };
        let mut nb: &[u8] = &node_bytes;
        let _next = varint(&mut nb);
        let _merging_child = varint(&mut nb);
        let _merging = u8b(&mut nb);
        let prefix_len = u8b(&mut nb);
        let lo = ivec(&mut nb);
        let hi = ivec(&mut nb);
        let disc = u8b(&mut nb);
        let cnt = varint(&mut nb);
        if disc == 0 {
            leaf_pages += 1;
            leaf_keys += cnt;
            fill_hist[(cnt as usize).min(17)] += 1;
            leaf_base_bytes += base.size;
            leaf_frag_bytes += fb;
            leaf_frags += frags.len() as u64;
            prefix_sum += prefix_len as u64 * cnt;
            lohi_bytes += (lo.len() + hi.len()) as u64;
            for _ in 0..cnt {
                key_suffix_bytes += ivec(&mut nb).len() as u64;
            }
            for _ in 0..cnt {
                val_bytes += ivec(&mut nb).len() as u64;
            }
        } else {
            index_pages += 1;
        }
    }
    let live = base_bytes + frag_bytes;
    let mut hist = [(0u64, 0u64); 5]; // [empty, <=25%, <=50%, <=75%, >75%] (segments, bytes of file)
    for s in 0..nseg {
        let l = *live_per_seg.get(&s).unwrap_or(&0);
        let pct = l * 100 / segment;
        let i = if l == 0 {
            0
        } else if pct <= 25 {
            1
        } else if pct <= 50 {
            2
        } else if pct <= 75 {
            3
        } else {
            4
        };
        hist[i].0 += 1;
        hist[i].1 += l;
    }
    println!(
        "SNAPINFO dir={} snap={} snap_bytes={} db_file={} segment={} segments={}",
        dir.display(),
        snap,
        n,
        file_len,
        segment,
        nseg
    );
    println!("SNAPINFO pages_present={} free_pages={} leaf_pages={} index_pages={} leaf_keys={} keys_per_leaf={:.2}",
        pages.len(), free_pages, leaf_pages, index_pages, leaf_keys, leaf_keys as f64 / leaf_pages as f64);
    println!(
        "SNAPINFO leaf_fill_histogram(keys:pages)={}",
        (0..18)
            .filter(|&i| fill_hist[i] > 0)
            .map(|i| format!("{}:{}", i, fill_hist[i]))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("SNAPINFO live_log_bytes={} (base={} frags={} n_frags={} frags_per_page={:.2}) live/db_file={:.3}",
        live, base_bytes, frag_bytes, nfrags, nfrags as f64 / pages.len() as f64, live as f64 / file_len as f64);
    println!("SNAPINFO leaf_base_bytes_per_key={:.2} leaf_frag_bytes_per_key={:.2} leaf_frags={} avg_prefix_len={:.2} avg_stored_key_suffix={:.2} avg_value_len={:.2} lo+hi_bytes_per_key={:.2}",
        leaf_base_bytes as f64 / leaf_keys as f64, leaf_frag_bytes as f64 / leaf_keys as f64, leaf_frags,
        prefix_sum as f64 / leaf_keys as f64, key_suffix_bytes as f64 / leaf_keys as f64,
        val_bytes as f64 / leaf_keys as f64, lohi_bytes as f64 / leaf_keys as f64);
    let names = [
        "no-live-data",
        "live<=25%",
        "live<=50%",
        "live<=75%",
        "live>75%",
    ];
    for i in 0..5 {
        println!(
            "SNAPINFO segments[{}]={} ({:.1} MB of file, live {:.1} MB)",
            names[i],
            hist[i].0,
            (hist[i].0 * segment) as f64 / 1e6,
            hist[i].1 as f64 / 1e6
        );
    }
}
