use super::*;

#[test]
fn correlation_data_is_16_random_bytes_per_request() {
    let drawn: Vec<Bytes> = (0..64).map(|_| new_correlation()).collect();
    assert!(drawn.iter().all(|c| c.len() == 16));
    let distinct: std::collections::HashSet<&Bytes> = drawn.iter().collect();
    assert_eq!(distinct.len(), drawn.len(), "never the same twice");
    // Every byte varies (a counter, or a process id, would keep some of them fixed); a
    // random position repeats one value over 64 draws with probability 2^-504.
    for position in 0..16 {
        let values: std::collections::HashSet<u8> = drawn.iter().map(|c| c[position]).collect();
        assert!(values.len() > 1, "byte {position} never changes");
    }
}
