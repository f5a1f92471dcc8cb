//! lutra-embedded: lutra on Raspberry Pi-class machines, with or without an OS.
//!
//! `#![no_std]`: the engine is lutra-core's (one forward pass, one sampler); this crate
//! adds what a machine without a general heap needs: [`arena`], a compile-time-sized
//! region as the only heap, sealed while generating; [`budget`], what a model needs
//! from it, known before anything is imported; [`packed`], a `.lutra` image read in
//! place from a `&'static [u8]` (`include_bytes!` on bare metal); and one logging
//! shim ([`info!`]): `log` on Linux, `defmt` on bare metal.
//! With `std` (default), [`pi`] is what the static `lutra-pi` binary runs.
#![no_std]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod arena;
pub mod budget;
#[doc(hidden)]
pub mod logging;
pub mod packed;
#[cfg(feature = "std")]
pub mod pi;
