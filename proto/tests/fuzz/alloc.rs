//! A counting global allocator, so that the fuzz properties can check that no decoder allocates
//! more than a small multiple of its input, whatever lengths that input claims.
//!
//! Counting is per thread and only inside [`measure`], so the test harness's own allocations
//! and the tests running on other threads do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// [`System`], counting the bytes the current thread asks for while [`measure`] runs.
pub struct Counting;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    /// Bytes requested since `measure` started: every allocation and every reallocation's new
    /// size, frees not subtracted. An upper bound on the peak.
    static REQUESTED: Cell<usize> = const { Cell::new(0) };
}

/// Most bytes decoding `n` bytes of input may allocate: a few times the input (a decoder may
/// keep a copy of a field, e.g. a binlog file name) plus a constant for small bookkeeping.
/// Claimed lengths (a 16 MiB packet header, a 2^60-byte string) must not count.
pub fn limit(n: usize) -> usize {
    4 * n + 64 * 1024
}

/// Runs `f` and returns its result with the bytes it allocated on this thread. Not reentrant.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    /// Stops counting even if `f` panics (proptest catches the panic and goes on).
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            MEASURING.with(|m| m.set(false));
        }
    }
    REQUESTED.with(|r| r.set(0));
    MEASURING.with(|m| m.set(true));
    let stop = Stop;
    let out = f();
    drop(stop);
    (out, REQUESTED.with(Cell::get))
}

/// Runs a decoder on `n` bytes of input.
///
/// # Panics
/// If it allocated more than [`limit`]`(n)` bytes.
pub fn bounded<T>(n: usize, f: impl FnOnce() -> T) -> T {
    let (out, bytes) = measure(f);
    assert!(
        bytes <= limit(n),
        "decoding {n} bytes allocated {bytes} bytes (limit {})",
        limit(n)
    );
    out
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown, after the slots are gone, are not ours.
    let _ = MEASURING.try_with(|m| {
        if m.get() {
            REQUESTED.with(|r| r.set(r.get().saturating_add(size)));
        }
    });
}

// === impl Counting ===

// SAFETY: every method forwards to `System` with the arguments it was given, so `System`'s
// guarantees carry over; the counting touches only const-initialised thread-locals without
// destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, and the caller upholds `realloc`'s size contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[test]
fn the_counter_sees_allocations_and_nothing_else() {
    let (v, bytes) = measure(|| vec![7u8; 1 << 20]);
    assert!(bytes >= 1 << 20, "{bytes}");
    drop(v);
    let ((), bytes) = measure(|| ());
    assert_eq!(bytes, 0);
    let outside = vec![1u8; 4096];
    let (sum, bytes) = measure(|| outside.iter().map(|&b| usize::from(b)).sum::<usize>());
    assert_eq!((sum, bytes), (4096, 0));
    let too_much = std::panic::catch_unwind(|| bounded(10, || vec![0u8; limit(10) + 1]));
    assert!(too_much.is_err(), "the bound must be able to fail");
}
