//! Block-import cases: llama.cpp blocks of one type, and what llama.cpp's dequantization
//! makes of them (exact values, or "a non-finite scale in row R", which lutra must refuse).
//! `tests/examples/block_golden.rs` writes them with llama.cpp in-process;
//! `tests/tests/block_import.rs` checks lutra's import against them.
//!
//! File format (`golden/blocks.bin`), little-endian, after one text line of provenance
//! ending in `\n`, records until the end:
//!
//! ```text
//! u8 name length, name (ggml type name) · u32 rows · u32 cols · u32 poisoned row (u32::MAX: none)
//! u32 block bytes, the blocks · unless poisoned: rows × cols f32, llama.cpp's weights
//! ```

use core::ops::Range;
use lutra_core::kernels::int8::Int8Matrix;

use lutra_core::formats::gguf::GgmlType;
use lutra_core::formats::import::{lookup_matrix, InMemory};
use lutra_core::model::ModelError;
use lutra_core::{AlignedBytes, Error, PackedMatrix};

/// The golden file of block-import cases (in this crate).
pub const BLOCKS_GOLDEN: &str = "golden/blocks.bin";

/// What llama.cpp makes of a case's blocks.
#[derive(Clone, Debug, PartialEq)]
pub enum Expected {
    /// Its weights, row after row.
    Weights(Vec<f32>),
    /// A scale in this row is NaN or ±Inf: llama.cpp computes non-finite weights, lutra
    /// must refuse the matrix naming the row.
    NonFiniteScaleInRow(usize),
}

/// One matrix of blocks and llama.cpp's reading of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub type_name: String,
    pub rows: usize,
    pub cols: usize,
    pub blocks: Vec<u8>,
    pub expected: Expected,
}

/// Appends `case` to a golden file's bytes.
pub fn write_case(out: &mut Vec<u8>, case: &Case) {
    out.push(case.type_name.len() as u8);
    out.extend_from_slice(case.type_name.as_bytes());
    let poisoned = match case.expected {
        Expected::NonFiniteScaleInRow(row) => row as u32,
        Expected::Weights(_) => u32::MAX,
    };
    for v in [case.rows as u32, case.cols as u32, poisoned, case.blocks.len() as u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&case.blocks);
    if let Expected::Weights(w) = &case.expected {
        w.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    }
}

/// Parses a golden file (after its first line).
pub fn read_cases(bytes: &[u8]) -> Result<Vec<Case>, String> {
    let start = bytes.iter().position(|&b| b == b'\n').ok_or("no provenance line")? + 1;
    let mut r = Reader(&bytes[start..]);
    let mut cases = Vec::new();
    while !r.0.is_empty() {
        let name_len = r.take(1)?[0] as usize;
        let type_name = String::from_utf8(r.take(name_len)?.to_vec()).map_err(|e| e.to_string())?;
        let (rows, cols, poisoned, len) = (r.u32()? as usize, r.u32()? as usize, r.u32()?, r.u32()? as usize);
        let blocks = r.take(len)?.to_vec();
        let expected = if poisoned == u32::MAX {
            let raw = r.take(rows * cols * 4)?;
            Expected::Weights(raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
        } else {
            Expected::NonFiniteScaleInRow(poisoned as usize)
        };
        cases.push(Case { type_name, rows, cols, blocks, expected });
    }
    Ok(cases)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("truncated: {n} bytes wanted, {} left", self.0.len()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
}

/// lutra's import of `rows × cols` weights of ggml type `type_name` as the engine makes
/// it (`import::lookup_matrix`), reading the blocks `rows_per_run` rows at a time, and
/// each run's byte range as the import reports it.
pub fn import_in_runs(
    type_name: &str,
    blocks: &[u8],
    rows: usize,
    cols: usize,
    rows_per_run: usize,
) -> Result<(PackedMatrix<AlignedBytes>, Vec<Range<usize>>), Error> {
    let t = GgmlType::ALL.iter().copied().find(|t| t.name() == type_name).unwrap_or_else(|| panic!("no ggml type {type_name}"));
    let run_bytes = rows_per_run * blocks.len() / rows.max(1);
    let mut runs = Vec::new();
    let m =
        lookup_matrix(t, &mut InMemory(blocks), 0..blocks.len() as u64, rows, cols, run_bytes, |r| runs.push(r)).map_err(|e| match e {
            ModelError::Kernel(e) => e,
            other => panic!("{type_name}: {other}"),
        })?;
    Ok((m, runs))
}

/// lutra's import of `rows × cols` weights of ggml type `type_name`, dequantized row by
/// row: the lookup form, and for Q8_0 also the int8 form the engine uses (both must
/// equal llama.cpp's weights).
pub fn import_and_dequantize(type_name: &str, blocks: &[u8], rows: usize, cols: usize) -> Result<Vec<Vec<f32>>, Error> {
    let (lookup, _) = import_in_runs(type_name, blocks, rows, cols, 32)?;
    let mut row = vec![0f32; cols];
    let mut lookup_weights = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        lookup.dequantize_row(r, &mut row)?;
        lookup_weights.extend_from_slice(&row);
    }
    let mut forms = vec![lookup_weights];
    if type_name == "Q8_0" {
        let mut int8 = Int8Matrix::for_q8_0(rows, cols)?;
        int8.set_q8_0_rows(0, blocks)?;
        let mut int8_weights = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            int8.dequantize_row(r, &mut row)?;
            int8_weights.extend_from_slice(&row);
        }
        forms.push(int8_weights);
    }
    Ok(forms)
}

/// Checks lutra's import of `case` against llama.cpp's reading: every weight equal bit
/// for bit (so ±0 and subnormals too), or the refusal naming the poisoned row.
pub fn check_case(case: &Case) -> Result<(), String> {
    let what = format!("{} {}x{}", case.type_name, case.rows, case.cols);
    match (&case.expected, import_and_dequantize(&case.type_name, &case.blocks, case.rows, case.cols)) {
        (Expected::Weights(want), Ok(forms)) => {
            for (form, got) in forms.iter().enumerate() {
                let differ = got.iter().zip(want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                if differ != 0 || got.len() != want.len() {
                    return Err(format!("{what} (form {form}): {differ} of {} weights differ from llama.cpp's", want.len()));
                }
            }
            Ok(())
        }
        (Expected::NonFiniteScaleInRow(row), Err(Error::NonFiniteScale { row: at, .. })) if at == *row => Ok(()),
        (expected, got) => Err(format!("{what}: llama.cpp {expected:?}, lutra {got:?}", expected = short(expected))),
    }
}

fn short(e: &Expected) -> String {
    match e {
        Expected::Weights(w) => format!("{} finite weights", w.len()),
        Expected::NonFiniteScaleInRow(r) => format!("non-finite scale in row {r}"),
    }
}

/// Two cases of `rows × cols` weights from `seed`, read by llama.cpp: random blocks with
/// finite scales, and the same blocks with one scale made non-finite. With
/// `every_edge`, the first blocks' scales run through all of `EDGE_SCALES`.
#[cfg(feature = "llamacpp")]
pub fn llama_cpp_cases(t: &lutra_bench::llamacpp::blocks::BlockType, rows: usize, cols: usize, seed: u64, every_edge: bool) -> [Case; 2] {
    use lutra_bench::llamacpp::blocks::{EDGE_SCALES, NON_FINITE_SCALES};
    let per_row = cols / t.block_elems();
    let mut blocks = t.random_blocks(rows * per_row, seed);
    let fields = t.scale_offsets.len();
    if every_edge {
        assert!(rows * per_row * fields >= EDGE_SCALES.len(), "{}: too few blocks for every edge scale", t.name);
        for (i, &edge) in EDGE_SCALES.iter().enumerate() {
            t.set_scale(&mut blocks, i / fields, i % fields, edge);
        }
    }
    let clean =
        Case { type_name: t.name.to_string(), rows, cols, blocks: blocks.clone(), expected: Expected::Weights(t.dequantize(&blocks)) };
    let s = seed as usize;
    let (block, field) = (s % (rows * per_row), s / 7 % fields);
    t.set_scale(&mut blocks, block, field, NON_FINITE_SCALES[s % NON_FINITE_SCALES.len()]);
    let row = block / per_row;
    let weights = t.dequantize(&blocks);
    assert!(weights[row * cols..][..cols].iter().any(|v| !v.is_finite()), "{} seed {seed}: llama.cpp stays finite", t.name);
    let poisoned = Case { type_name: t.name.to_string(), rows, cols, blocks, expected: Expected::NonFiniteScaleInRow(row) };
    [clean, poisoned]
}
