//! lutra-embedded: lutra on Raspberry Pi-class machines. `pi` is what the static
//! `lutra-pi` binary runs: a packed `.lutra` model mapped and read in place, every
//! working buffer allocated before the first token, nothing allocated while generating
//! (tests/no_alloc.rs counts).

pub mod pi;

pub use pi::generate_counting;
