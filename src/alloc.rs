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
//! Every mimalloc block is at least word-aligned (its size classes are
//! whole words, 16 bytes apart above 8, and each page's first block is
//! 16-aligned), so an alignment of a word or less needs no aligned call
//! at all: that is almost every Rust type. Larger
//! alignments (tokio's cache-padded task cells) still take
//! `mi_malloc_aligned`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The widest alignment every mimalloc block has without asking.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (set in `main.rs`).
pub struct Allocator;

// SAFETY: each method hands mimalloc's result back unchanged; plain
// `mi_malloc`/`mi_zalloc`/`mi_realloc` are used only for alignments of
// a word or less, which every mimalloc block meets, and `mi_free`
// releases blocks from either family.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
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
        if layout.align() <= WORD {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_realloc(ptr, new_size).cast() }
        } else {
            // SAFETY: see the impl's note.
            unsafe { mi::mi_realloc_aligned(ptr, new_size, layout.align()).cast() }
        }
    }
}
