//! Transparent huge pages off for the node's process.
//!
//! mimalloc asks the kernel for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), so with THP
//! in `madvise` or `always` mode every first touch of a fresh or purged 2 MiB region faults in,
//! and zeroes, a whole huge page. The apply, flush and WAL threads allocate and free at a high
//! rate, and the profile of SET 64×8 showed the kernel's `clear_page_erms` at 6-14 % of each
//! node's CPU (BENCHMARKS.md). With THP off for the process, a fault zeroes the 4 KiB it needs:
//! alternated runs took 6-8 % less CPU per SET (65.0 against 61.2 and 59.8 µs in the nodes).
//! Redis, MongoDB and TiKV give the same advice for the same reason.
//!
//! `prctl(PR_SET_THP_DISABLE)` applies to this process only (and is inherited by children),
//! whatever the system-wide setting, and to regions already mapped, from their next fault.

/// Turns transparent huge pages off for this process. Returns true if this call turned them
/// off, false if the process had them off already.
pub fn disable() -> std::io::Result<bool> {
    let were_disabled = rustix::thread::transparent_huge_pages_are_disabled()?;
    if !were_disabled {
        rustix::thread::disable_transparent_huge_pages(true)?;
    }
    Ok(!were_disabled)
}

#[cfg(test)]
mod tests;
