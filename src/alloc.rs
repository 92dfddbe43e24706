//! The process's allocator: mimalloc, asked the way that keeps it on its
//! fast path.
//!
//! A gateway allocates many small, short-lived buffers per request, and
//! mimalloc serves them with far less CPU than the system allocator. The
//! `mimalloc` crate's adapter sends every Rust allocation through
//! `mi_malloc_aligned`, whose fallback (taken whenever the size class's
//! free list is empty, and for every block over 1 KiB) over-allocates
//! into the next size class. Its page for the asked size is then never
//! refilled, so one size that misses once keeps missing (mimalloc issue
//! #889): about a dozen slow allocations per proxied request.
//!
//! Every mimalloc block is at least word-aligned, and every block of 16
//! bytes or more is 16-aligned (its size classes are whole words, 16
//! bytes apart above 8, and each page's first block is 16-aligned:
//! `MI_MAX_ALIGN_SIZE`), so an alignment of a word or less, or of 16 for
//! a block at least that large, needs no aligned call at all: that is
//! almost every Rust type, and the 16-aligned ones a request makes (its
//! context and its future hold OpenTelemetry's `u128` trace id;
//! hashbrown's tables are 16-aligned) took the aligned path's fallback,
//! 110 instructions a call where plain `mi_malloc` takes 40, and were
//! over-allocated into the next size class. Larger alignments (tokio's
//! cache-padded task cells) still take `mi_malloc_aligned`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The widest alignment every mimalloc block has without asking.
const WORD: usize = std::mem::size_of::<usize>();
/// The alignment every mimalloc block of at least this many bytes has
/// without asking (`MI_MAX_ALIGN_SIZE`).
const MAX_ALIGN: usize = 16;

/// Whether plain `mi_malloc` of `size` bytes meets alignment `align`.
#[inline]
fn plain(size: usize, align: usize) -> bool {
    align <= WORD || (align <= MAX_ALIGN && size >= align)
}

/// mimalloc as the global allocator (set in `main.rs`).
pub struct Allocator;

// SAFETY: each method hands mimalloc's result back unchanged; plain
// `mi_malloc`/`mi_zalloc`/`mi_realloc` are used only for alignments
// every mimalloc block of that size meets ([`plain`]), and `mi_free`
// and `mi_realloc` take blocks from either family.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain(layout.size(), layout.align()) {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain(layout.size(), layout.align()) {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let ptr = ptr.cast::<c_void>();
        if plain(new_size, layout.align()) {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_realloc(ptr, new_size).cast() }
        } else {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_realloc_aligned(ptr, new_size, layout.align()).cast() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every size class up to 4 KiB and two large ones, asked
    /// for with alignments from 1 to 32 bytes, meet them; so do those
    /// grown by `realloc`.
    #[test]
    fn plain_blocks_meet_the_alignment_asked() {
        let a = Allocator;
        for align in [1, 2, 4, 8, 16, 32] {
            let mut blocks = Vec::new();
            for size in (align.max(8)..=4096)
                .step_by(align.max(8))
                .chain([65536, 1 << 20])
            {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                for _ in 0..8 {
                    // SAFETY: `layout` has a non-zero size.
                    let p = unsafe { a.alloc(layout) };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size}, align {align}");
                    blocks.push((p, layout));
                }
            }
            for (p, layout) in blocks {
                let grown = layout.size() * 3 + 16;
                // SAFETY: `p` came from `a` with `layout`; `grown` is
                // non-zero and rounded up stays under `isize::MAX`.
                let q = unsafe { a.realloc(p, layout, grown) };
                assert!(!q.is_null());
                assert_eq!(q as usize % layout.align(), 0);
                let Ok(grown) = Layout::from_size_align(grown, layout.align()) else {
                    continue;
                };
                // SAFETY: `q` came from `a` with `grown`.
                unsafe { a.dealloc(q, grown) };
            }
        }
    }
}
