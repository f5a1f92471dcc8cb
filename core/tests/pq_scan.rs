//! PQ score kernels: every ISA's `scan16` / `scan256` against the scalar reference, bit
//! for bit; the 4-bit layout pinned by hand-written codes; errors instead of panics.

mod common;
use common::Rng;

use lutra_core::kernels::pq_scan::{block_bytes16, block_bytes256, get_code16, get_code256, set_code16, set_code256};
use lutra_core::kernels::pq_scan::{scan16, scan256, scan256_heads, BLOCK_KEYS, SCAN_HEADS};
use lutra_core::{Error, Isa};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const SUBSPACES: [usize; 10] = [2, 4, 6, 8, 16, 32, 62, 64, 128, 256];
/// 11 = 8 + 2 + 1: the AVX-512 VBMI scan256 takes 8 blocks per pass, then pairs, then one.
const BLOCKS: [usize; 5] = [1, 2, 3, 7, 11];

fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// The SIMD kernels this build can run here (scalar is the reference).
fn simd_isas() -> Vec<Isa> {
    let isas: Vec<Isa> = Isa::available().filter(|&i| i != Isa::Scalar).collect();
    // the tier this target is built for is among them (which one: tests/isa.rs)
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    assert_eq!(isas, [Isa::Simd128]);
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    assert_eq!(isas, [Isa::Neon]);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("pq scan: checking {:?} against scalar (Isa::best() = {})", isas, Isa::best().name());
    isas
}

type Scan = fn(Isa, &[u8], usize, &[u8], &mut [u16]) -> Result<(), Error>;

/// `scan` on `isa` equals the scalar scores of the same input; returns them.
fn same_as_scalar(scan: Scan, isa: Isa, codes: &[u8], s: usize, tables: &[u8], n: usize, what: &str) -> Vec<u16> {
    let mut want = vec![0u16; n];
    scan(Isa::Scalar, codes, s, tables, &mut want).unwrap();
    let mut got = vec![0xdead; n];
    scan(isa, codes, s, tables, &mut got).unwrap();
    if let Some(k) = (0..n).find(|&k| got[k] != want[k]) {
        panic!("{what} {}: S = {s}, {} keys: key {k} = {}, scalar {}", isa.name(), n, got[k], want[k]);
    }
    want
}

#[test]
fn scan16_every_isa_equals_scalar() {
    let mut rng = Rng(16);
    let isas = simd_isas();
    for s in SUBSPACES {
        for blocks in BLOCKS {
            let codes = bytes(&mut rng, blocks * block_bytes16(s));
            let tables = bytes(&mut rng, 16 * s);
            for &isa in &isas {
                same_as_scalar(scan16, isa, &codes, s, &tables, BLOCK_KEYS * blocks, "scan16");
            }
        }
    }
}

#[test]
fn scan256_every_isa_equals_scalar() {
    let mut rng = Rng(256);
    let isas = simd_isas();
    for s in SUBSPACES {
        for blocks in BLOCKS {
            let codes = bytes(&mut rng, blocks * block_bytes256(s));
            let tables = bytes(&mut rng, 256 * s);
            for &isa in &isas {
                same_as_scalar(scan256, isa, &codes, s, &tables, BLOCK_KEYS * blocks, "scan256");
            }
        }
    }
}

/// Several query heads at once: each head's scores are the scalar `scan256` over that
/// head's own tables (de-interleaved here), on every ISA, for 1–4 heads; all-255 tables
/// at S = 256 reach the largest sum in every head.
#[test]
fn scan256_heads_equals_scan256_per_head() {
    let mut rng = Rng(257);
    let isas: Vec<Isa> = Isa::available().collect();
    for s in SUBSPACES {
        for blocks in [1, 3] {
            let n = BLOCK_KEYS * blocks;
            let codes = bytes(&mut rng, blocks * block_bytes256(s));
            let tables = bytes(&mut rng, 256 * SCAN_HEADS * s);
            let mut want = vec![0u16; SCAN_HEADS * n];
            for (h, want) in want.chunks_exact_mut(n).enumerate() {
                let own: Vec<u8> = tables.iter().skip(h).step_by(SCAN_HEADS).copied().collect();
                scan256(Isa::Scalar, &codes, s, &own, want).unwrap();
            }
            for &isa in &isas {
                for heads in 1..=SCAN_HEADS {
                    let mut got = vec![0xdead; heads * n];
                    scan256_heads(isa, &codes, s, &tables, heads, &mut got).unwrap();
                    assert_eq!(got, want[..heads * n], "{} S = {s}, {blocks} blocks, {heads} heads", isa.name());
                }
            }
        }
    }
    for &isa in &isas {
        let mut out = vec![0; SCAN_HEADS * BLOCK_KEYS];
        scan256_heads(isa, &vec![255; 256 * BLOCK_KEYS], 256, &vec![255; 256 * SCAN_HEADS * 256], SCAN_HEADS, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 65_280), "scan256_heads {}", isa.name());
        assert!(matches!(scan256_heads(isa, &[0; 64], 2, &[0; 2048], 0, &mut out), Err(Error::BufferSize { .. })));
        assert!(matches!(scan256_heads(isa, &[0; 64], 2, &[0; 2048], 3, &mut out[..64]), Err(Error::BufferSize { .. })));
        assert!(matches!(scan256_heads(isa, &[0; 64], 2, &[0; 512], 2, &mut out[..64]), Err(Error::BufferSize { .. })));
    }
}

/// Every table entry 255 at S = 256: each score is 65 280 (the largest), on every ISA.
#[test]
fn worst_case_sums_are_exact() {
    let mut rng = Rng(255);
    let s = 256;
    for isa in Isa::available() {
        for blocks in [1, 3, 11] {
            let codes = bytes(&mut rng, blocks * block_bytes16(s));
            let mut out = vec![0; BLOCK_KEYS * blocks];
            scan16(isa, &codes, s, &[255; 16 * 256], &mut out).unwrap();
            assert!(out.iter().all(|&x| x == 65_280), "scan16 {}", isa.name());

            let codes = bytes(&mut rng, blocks * block_bytes256(s));
            let mut out = vec![0; BLOCK_KEYS * blocks];
            scan256(isa, &codes, s, &[255; 256 * 256], &mut out).unwrap();
            assert!(out.iter().all(|&x| x == 65_280), "scan256 {}", isa.name());
        }
    }
}

/// Tables whose entries differ per sub-space and code, codes from an array: every ISA
/// gives Σ_s tables[16s + code(key, s)] (pins the 4-bit layout, not just agreement).
#[test]
fn scan16_matches_the_formula() {
    let s = 6;
    let blocks = 2;
    // code(key, sub) over both blocks, a pattern that tells keys, sub-spaces and nibbles apart
    let code = |key: usize, sub: usize| ((key * 7 + sub * 3 + key / 16) % 16) as u8;
    // entries depend on both the sub-space and the code
    let tables: Vec<u8> = (0..16 * s).map(|i| (i / 16 * 37 + (i % 16) * (i % 16) + 1) as u8).collect();

    let mut codes = vec![0u8; blocks * block_bytes16(s)];
    for (b, block) in codes.chunks_exact_mut(block_bytes16(s)).enumerate() {
        for key in 0..BLOCK_KEYS {
            for sub in 0..s {
                set_code16(block, s, key, sub, code(32 * b + key, sub));
            }
        }
    }
    // the layout written out by hand for block 0: chunk p, byte j / 16 + j
    for p in 0..s / 2 {
        for j in 0..16 {
            assert_eq!(codes[32 * p + j], code(j, 2 * p) | code(j + 16, 2 * p) << 4);
            assert_eq!(codes[32 * p + 16 + j], code(j, 2 * p + 1) | code(j + 16, 2 * p + 1) << 4);
        }
    }
    let want: Vec<u16> =
        (0..blocks * BLOCK_KEYS).map(|k| (0..s).map(|sub| tables[16 * sub + code(k, sub) as usize] as u16).sum()).collect();
    for isa in Isa::available() {
        let mut out = vec![0; blocks * BLOCK_KEYS];
        scan16(isa, &codes, s, &tables, &mut out).unwrap();
        assert_eq!(out, want, "{}", isa.name());
    }

    // 8-bit: byte 32s + j of a block
    let code8 = |key: usize, sub: usize| ((key * 29 + sub * 101 + 7) % 256) as u8;
    let tables8: Vec<u8> = (0..256 * s).map(|i| (i * 13 + i / 256) as u8).collect();
    let mut codes8 = vec![0u8; blocks * block_bytes256(s)];
    for (b, block) in codes8.chunks_exact_mut(block_bytes256(s)).enumerate() {
        for key in 0..BLOCK_KEYS {
            for sub in 0..s {
                set_code256(block, s, key, sub, code8(32 * b + key, sub));
                assert_eq!(block[32 * sub + key], code8(32 * b + key, sub));
            }
        }
    }
    let want: Vec<u16> =
        (0..blocks * BLOCK_KEYS).map(|k| (0..s).map(|sub| tables8[256 * sub + code8(k, sub) as usize] as u16).sum()).collect();
    for isa in Isa::available() {
        let mut out = vec![0; blocks * BLOCK_KEYS];
        scan256(isa, &codes8, s, &tables8, &mut out).unwrap();
        assert_eq!(out, want, "{}", isa.name());
    }
}

#[test]
fn codes_round_trip() {
    let mut rng = Rng(7);
    for s in [2, 6, 64] {
        let want: Vec<u8> = (0..BLOCK_KEYS * s).map(|_| rng.next() as u8).collect();
        // start from noise: set must overwrite only its own nibble
        let mut block16 = bytes(&mut rng, block_bytes16(s));
        let mut block256 = bytes(&mut rng, block_bytes256(s));
        for key in 0..BLOCK_KEYS {
            for sub in 0..s {
                set_code16(&mut block16, s, key, sub, want[key * s + sub] & 15);
                set_code256(&mut block256, s, key, sub, want[key * s + sub]);
            }
        }
        for key in 0..BLOCK_KEYS {
            for sub in 0..s {
                assert_eq!(get_code16(&block16, s, key, sub), want[key * s + sub] & 15);
                assert_eq!(get_code256(&block256, s, key, sub), want[key * s + sub]);
            }
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let isa = Isa::best();
    for s in [0, 1, 3, 63, 257, 258, usize::MAX] {
        let mut out = [0u16; 32];
        assert_eq!(scan16(isa, &[0; 16], s, &[0; 16], &mut out), Err(Error::BadSubspaces(s)));
        assert_eq!(scan256(isa, &[0; 32], s, &[0; 256], &mut out), Err(Error::BadSubspaces(s)));
    }
    let s = 4;
    let (b16, b256) = (block_bytes16(s), block_bytes256(s));
    let bad_len = |r: Result<(), Error>| assert!(matches!(r, Err(Error::BufferSize { .. })), "{r:?}");
    let mut out = vec![0u16; 64];
    // codes not whole blocks
    bad_len(scan16(isa, &vec![0; 2 * b16 - 1], s, &[0; 64], &mut out));
    bad_len(scan256(isa, &vec![0; 2 * b256 + 32], s, &[0; 1024], &mut out));
    // tables of the wrong size
    bad_len(scan16(isa, &vec![0; 2 * b16], s, &[0; 63], &mut out));
    bad_len(scan256(isa, &vec![0; 2 * b256], s, &[0; 64], &mut out));
    // scores of the wrong size
    bad_len(scan16(isa, &vec![0; 2 * b16], s, &[0; 64], &mut out[..63]));
    bad_len(scan256(isa, &vec![0; 2 * b256], s, &[0; 1024], &mut [0; 96]));
    // no blocks at all is fine
    assert_eq!(scan16(isa, &[], s, &[0; 64], &mut []), Ok(()));
    assert_eq!(scan256(isa, &[], s, &[0; 1024], &mut []), Ok(()));
    // an ISA this build cannot run
    for other in Isa::ALL.into_iter().filter(|i| !i.is_available()) {
        assert_eq!(scan16(other, &vec![0; b16], s, &[0; 64], &mut out[..32]), Err(Error::IsaUnavailable(other)));
        assert_eq!(scan256(other, &vec![0; b256], s, &[0; 1024], &mut out[..32]), Err(Error::IsaUnavailable(other)));
    }
    assert!(!Error::BadSubspaces(3).to_string().is_empty());
}
