//! Table tests of the page layer: `testdata/pages.txt` (each line: operations, the view they
//! leave and the pending page count).

use super::FileData;

const CASES: &str = include_str!("../../testdata/pages.txt");

fn apply(file: &mut FileData, op: &str) {
    let words: Vec<&str> = op.split_whitespace().collect();
    let num = |i: usize| -> u64 { words[i].parse().expect("number in pages.txt") };
    match words[0] {
        "w" => {
            let byte = words[3].as_bytes()[0];
            file.write(num(1), &vec![byte; num(2) as usize]);
        }
        "t" => file.set_size(num(1)),
        "s" => {
            file.sync();
        }
        "c" => file.cut(),
        "k" => {
            let mut bits = words[1].bytes();
            file.cut_torn(&mut || bits.next() == Some(b'1'));
        }
        other => panic!("unknown operation {other:?} in pages.txt"),
    }
}

fn expand(view: &str) -> Vec<u8> {
    if view == "-" {
        return Vec::new();
    }
    let mut out = Vec::new();
    for run in view.split_whitespace() {
        let (c, n) = run.split_once(':').expect("C:N run in pages.txt");
        let byte = if c == "0" { 0 } else { c.as_bytes()[0] };
        out.extend(std::iter::repeat_n(byte, n.parse().expect("run length")));
    }
    out
}

#[test]
fn page_layer_table() {
    let mut ran = 0;
    for line in CASES
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split(';').map(str::trim).collect();
        let [name, ops, view, pending] = fields[..] else {
            panic!("malformed line in pages.txt: {line}");
        };
        let mut file = FileData::default();
        for op in ops.split(',') {
            apply(&mut file, op.trim());
        }
        let want = expand(view);
        assert_eq!(file.size(), want.len() as u64, "{name}: size");
        assert!(file.read(0, u64::MAX) == want, "{name}: view differs");
        let pending: usize = pending.parse().expect("pending count");
        assert_eq!(file.pending_pages(), pending, "{name}: pending pages");
        // Reads at odd offsets agree with the whole view.
        for (off, len) in [(1u64, 4095u64), (4095, 2), (4100, 9000)] {
            let got = file.read(off, len);
            let lo = (off as usize).min(want.len());
            let hi = ((off + len) as usize).min(want.len());
            assert!(got == want[lo..hi], "{name}: read({off}, {len})");
        }
        ran += 1;
    }
    assert!(ran >= 20, "pages.txt has {ran} cases");
}

#[test]
fn sync_reports_the_changed_ranges() {
    let mut file = FileData::from_durable(vec![b'a'; 8192]);
    file.set_size(100);
    file.write(5000, b"xy");
    let changed = file.sync();
    assert_eq!(changed, vec![100..5002, 4096..5002]);
    assert_eq!(file.durable().len(), 5002);
    assert!(!file.is_pending());
}
