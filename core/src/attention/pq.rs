//! The NoMAD key cache: keys stored as product-quantization codes in 32-key blocks per
//! (layer, KV head); scores by table lookup. Grouped-query attention shares one code
//! block between the query heads of a KV head: each query head builds its own tables
//! and scans the same codes.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, Parallel, Pieces, ValueCache, ValueFormat, PIECE_ROWS};
use crate::f16::f16_bits_to_f32;
use crate::kernels::attend::{dot, f16_row};
use crate::kernels::pq_scan::{scan16, scan256, scan256_heads, scan256_prefers_heads, set_code16, set_code256, BLOCK_KEYS, SCAN_HEADS};
use crate::pq::codebook::{Codebooks, PqError, TableScale};
use crate::Isa;

/// Where a layer's keys live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// PQ codes, the n-th PQ layer.
    Pq(usize),
    /// Exact f16 keys, the n-th exact layer.
    Exact(usize),
}

pub struct PqKvCache {
    shape: AttentionShape,
    books: Codebooks,
    isa: Isa,
    slots: Vec<Slot>,
    /// `[pq layer][kv_head][block][block_bytes]`; a windowed layer's blocks are a ring
    /// laid out like its values (position `p` in row `p % window`).
    codes: Vec<u8>,
    /// Where each PQ layer's codes start.
    code_starts: Vec<usize>,
    /// Values of the PQ layers, by PQ layer; their rows layout is the codes' too.
    values: ValueCache,
    /// How every layer's values are stored.
    value_format: ValueFormat,
    /// What `with_layers` asked for, kept so that `with_value_format` can lay them out again.
    layer_exact: Vec<bool>,
    layer_windows: Vec<usize>,
    /// The layers kept exact, by exact layer (`None` when there are none).
    exact: Option<ExactKvCache>,
    key_codes: Vec<u8>,
    float_tables: Vec<f32>,
    /// Every query head's tables (`subspaces × centroids` bytes each) and their scales.
    tables: Vec<u8>,
    /// With 256 centroids where `scan256_heads` is faster: the same tables, each KV head's
    /// query heads in fours, interleaved entry by entry (`scan256_heads`' layout);
    /// otherwise empty.
    head_tables: Vec<u8>,
    table_scales: Vec<TableScale>,
    pieces: Pieces,
    /// Positions `0..sink` and the last `recent` positions also keep exact f16 keys
    /// (`[layer][position][kv_dim]`; the recent ones in a ring), and score exactly.
    sink: usize,
    recent: usize,
    sink_keys: Vec<u16>,
    recent_keys: Vec<u16>,
}

impl PqKvCache {
    /// A cache for `shape` with codebooks trained for the same model; scores on `isa`.
    pub fn new(shape: AttentionShape, books: Codebooks, isa: Isa) -> Result<PqKvCache, PqError> {
        books.check_model(shape.layers, shape.kv_heads, shape.head_dim)?;
        if !isa.is_available() {
            return Err(PqError::Kernel(crate::Error::IsaUnavailable(isa)));
        }
        let pq = books.shape();
        let table_len = pq.subspaces * pq.centroids;
        let mut cache = PqKvCache {
            shape,
            isa,
            slots: Vec::new(),
            codes: Vec::new(),
            code_starts: Vec::new(),
            values: ValueCache::new(AttentionShape { layers: 0, ..shape }),
            value_format: ValueFormat::F16,
            layer_exact: Vec::new(),
            layer_windows: Vec::new(),
            exact: None,
            key_codes: vec![0; pq.subspaces],
            float_tables: vec![0.0; table_len],
            tables: vec![0; shape.heads * table_len],
            head_tables: if pq.centroids == 256 && shape.group() > 1 && scan256_prefers_heads(isa) {
                vec![0; shape.kv_heads * shape.group().div_ceil(SCAN_HEADS) * SCAN_HEADS * table_len]
            } else {
                Vec::new()
            },
            table_scales: vec![TableScale { scale: 1.0, bias: 0.0 }; shape.heads],
            pieces: Pieces::new(shape),
            books,
            sink: 0,
            recent: 0,
            sink_keys: Vec::new(),
            recent_keys: Vec::new(),
        };
        cache.set_layers(&[], &[]);
        Ok(cache)
    }

    /// Stores every layer's values as `format` (refused for a block format where head_dim
    /// is not a multiple of 32).
    pub fn with_value_format(mut self, format: ValueFormat) -> Result<PqKvCache, PqError> {
        format.check(self.shape.head_dim).map_err(PqError::Kernel)?;
        self.value_format = format;
        let (exact, windows) = (core::mem::take(&mut self.layer_exact), core::mem::take(&mut self.layer_windows));
        self.set_layers(&exact, &windows);
        Ok(self)
    }

    /// Also keeps exact f16 keys of the first `sink` positions (where attention sinks
    /// live) and of the most recent `recent` ones, and scores those exactly: a constant
    /// `(sink + recent) · kv_dim · 2` bytes per layer, whatever the context.
    pub fn with_exact_keys(mut self, sink: usize, recent: usize) -> PqKvCache {
        self.sink = sink.min(self.shape.context);
        self.recent = recent.min(self.shape.context);
        self.size_exact_window();
        self
    }

    /// Keeps exact f16 keys in the layers marked `true` (e.g. sliding-window layers,
    /// where lookups pay off least); codes are kept for the others. A layer with
    /// `windows[l] > 0`, exact or PQ, attends to its last `windows[l]` positions only and
    /// keeps a ring of that many keys (or codes) and values.
    pub fn with_layers(mut self, exact: &[bool], windows: &[usize]) -> PqKvCache {
        self.set_layers(exact, windows);
        self
    }

    fn set_layers(&mut self, exact: &[bool], windows: &[usize]) {
        (self.layer_exact, self.layer_windows) = (exact.to_vec(), windows.to_vec());
        let (mut pq_windows, mut exact_windows) = (Vec::new(), Vec::new());
        let window = |l: usize| windows.get(l).copied().unwrap_or(0);
        self.slots = (0..self.shape.layers)
            .map(|l| {
                if exact.get(l).copied().unwrap_or(false) {
                    exact_windows.push(window(l));
                    Slot::Exact(exact_windows.len() - 1)
                } else {
                    pq_windows.push(window(l));
                    Slot::Pq(pq_windows.len() - 1)
                }
            })
            .collect();
        let exact_shape = AttentionShape { layers: exact_windows.len(), ..self.shape };
        // `value_format` was checked against head_dim by `with_value_format`
        let format = self.value_format;
        self.exact = (!exact_windows.is_empty())
            .then(|| ExactKvCache::with_values(exact_shape, KeyPrecision::F16, ValueCache::checked(exact_shape, &exact_windows, format)));
        let pq_shape = AttentionShape { layers: pq_windows.len(), ..self.shape };
        self.values = ValueCache::checked(pq_shape, &pq_windows, format);
        let mut total = 0;
        self.code_starts = (0..pq_windows.len())
            .map(|p| {
                let start = total;
                total += self.shape.kv_heads * self.head_code_bytes(p);
                start
            })
            .collect();
        self.codes = vec![0; total];
        self.size_exact_window();
    }

    /// The sink and recent f16 keys, for the PQ layers only (exact layers have every key).
    fn size_exact_window(&mut self) {
        let pq_layers = self.slots.iter().filter(|s| matches!(s, Slot::Pq(_))).count();
        let kv_dim = self.shape.kv_dim();
        self.sink_keys = vec![0; pq_layers * self.sink * kv_dim];
        self.recent_keys = vec![0; pq_layers * self.recent * kv_dim];
    }

    pub fn codebooks(&self) -> &Codebooks {
        &self.books
    }

    /// Bytes of one KV head's code blocks in the `pq`-th PQ layer (its rows, in blocks).
    fn head_code_bytes(&self, pq: usize) -> usize {
        self.values.rows().cap(pq).div_ceil(BLOCK_KEYS) * self.books.shape().block_bytes()
    }

    /// The code bytes of the `pq`-th PQ layer's KV head.
    fn head_codes(&self, pq: usize, kv_head: usize) -> core::ops::Range<usize> {
        let len = self.head_code_bytes(pq);
        let at = self.code_starts[pq] + kv_head * len;
        at..at + len
    }
}

impl KvCache for PqKvCache {
    fn shape(&self) -> AttentionShape {
        self.shape
    }

    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let kv_dim = self.shape.kv_dim();
        let slot = match self.slots[layer] {
            Slot::Exact(e) => {
                if let Some(exact) = self.exact.as_mut() {
                    exact.store(e, pos, k, v);
                }
                return;
            }
            Slot::Pq(p) => p,
        };
        let pq = self.books.shape();
        let row = pos % self.values.rows().cap(slot);
        let (block, key) = (row / BLOCK_KEYS, row % BLOCK_KEYS);
        for (kvh, key_vec) in k.chunks_exact(self.shape.head_dim).enumerate() {
            self.books.encode(layer, kvh, key_vec, &mut self.key_codes);
            let range = self.head_codes(slot, kvh);
            let block = &mut self.codes[range][block * pq.block_bytes()..(block + 1) * pq.block_bytes()];
            for (s, &code) in self.key_codes.iter().enumerate() {
                if pq.centroids == 16 {
                    set_code16(block, pq.subspaces, key, s, code);
                } else {
                    set_code256(block, pq.subspaces, key, s, code);
                }
            }
        }
        if pos < self.sink {
            let at = (slot * self.sink + pos) * kv_dim;
            f16_row(k, &mut self.sink_keys[at..at + kv_dim]);
        }
        if self.recent > 0 {
            let at = (slot * self.recent + pos % self.recent) * kv_dim;
            f16_row(k, &mut self.recent_keys[at..at + kv_dim]);
        }
        self.values.store(slot, pos, v);
    }

    fn attend_with(&mut self, threads: &dyn Parallel, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        let (s, pq) = (self.shape, self.books.shape());
        let (hd, group, kv_dim) = (s.head_dim, s.group(), s.kv_dim());
        assert!(q.len() == s.heads * hd && out.len() == q.len(), "attention: q and out must hold heads × head_dim values");
        let slot = match self.slots[layer] {
            Slot::Exact(e) => {
                if let Some(exact) = self.exact.as_mut() {
                    exact.attend_with(threads, e, first, pos, q, q_scale, out);
                }
                return;
            }
            Slot::Pq(p) => p,
        };
        // each query head's tables, built once and read by every piece of its KV head
        let table_len = pq.subspaces * pq.centroids;
        for (h, qh) in q.chunks_exact(hd).enumerate() {
            let tables = &mut self.tables[h * table_len..(h + 1) * table_len];
            self.table_scales[h] = self.books.query_tables(layer, h / group, qh, q_scale, &mut self.float_tables, tables);
        }
        let fours = group.div_ceil(SCAN_HEADS);
        if !self.head_tables.is_empty() {
            for (h, tables) in self.tables.chunks_exact(table_len).enumerate() {
                let (kvh, g) = (h / group, h % group);
                let four = &mut self.head_tables[(kvh * fours + g / SCAN_HEADS) * SCAN_HEADS * table_len..][..SCAN_HEADS * table_len];
                for (entry, &t) in four.chunks_exact_mut(SCAN_HEADS).zip(tables) {
                    entry[g % SCAN_HEADS] = t;
                }
            }
        }
        // rows of a ring hold positions in turn; elsewhere row = position
        let (rows, masked) = self.values.rows().span(slot, first, pos);
        let cap = self.values.rows().cap(slot);
        let used = self.pieces.plan(s.kv_heads, rows);
        let (head_codes, bb) = (self.head_code_bytes(slot), pq.block_bytes());
        let (codes, code_start) = (&self.codes, self.code_starts[slot]);
        let (tables, head_tables, table_scales, values, isa) =
            (&self.tables, &self.head_tables, &self.table_scales, &self.values, self.isa);
        let (sink, recent, sink_keys, recent_keys) = (self.sink, self.recent, &self.sink_keys, &self.recent_keys);
        threads.run_pieces(self.pieces.planned(used), &|piece| {
            let (kvh, rows) = (piece.kv_head, piece.rows.clone());
            let (first_block, end_block) = (rows.start / BLOCK_KEYS, (rows.end - 1) / BLOCK_KEYS + 1);
            let skip = rows.start - first_block * BLOCK_KEYS;
            let at = code_start + kvh * head_codes;
            let codes = &codes[at + first_block * bb..at + end_block * bb];
            let keys = (end_block - first_block) * BLOCK_KEYS;
            // the group's heads, up to four per scan (`scan256_heads`) or one at a time
            let per_scan = if head_tables.is_empty() { 1 } else { SCAN_HEADS };
            for first_g in (0..group).step_by(per_scan) {
                let heads = per_scan.min(group - first_g);
                let sums = &mut piece.sums[..heads * keys];
                let scanned = if per_scan > 1 {
                    let four = &head_tables[(kvh * fours + first_g / SCAN_HEADS) * SCAN_HEADS * table_len..][..SCAN_HEADS * table_len];
                    scan256_heads(isa, codes, pq.subspaces, four, heads, sums)
                } else {
                    let tables = &tables[(kvh * group + first_g) * table_len..][..table_len];
                    if pq.centroids == 16 {
                        scan16(isa, codes, pq.subspaces, tables, sums)
                    } else {
                        scan256(isa, codes, pq.subspaces, tables, sums)
                    }
                };
                // every size above was made from the same shape, and `new` chose an available ISA
                debug_assert!(scanned.is_ok(), "{scanned:?}");
                for (j, sums) in sums.chunks_exact(keys).enumerate() {
                    let (g, h) = (first_g + j, kvh * group + first_g + j);
                    let scores = &mut piece.scores[g * PIECE_ROWS..][..rows.len()];
                    // the scale out of the loop: indexed inside it, its bounds check kept the
                    // loop scalar (a `mulss` and an `addss` per score)
                    let scale = table_scales[h];
                    for (d, &sum) in scores.iter_mut().zip(&sums[skip..]) {
                        *d = scale.score(sum);
                    }
                }
            }
            // the exactly kept positions in this piece overwrite their PQ scores; each key
            // is converted once for the whole group
            let sinks = first..(pos + 1).min(sink);
            let latest = first.max((pos + 1).saturating_sub(recent))..pos + 1;
            for (p, is_sink) in sinks.map(|p| (p, true)).chain(latest.map(|p| (p, false))) {
                if !rows.contains(&(p % cap)) {
                    continue;
                }
                let (keys, at) =
                    if is_sink { (sink_keys, (slot * sink + p) * kv_dim) } else { (recent_keys, (slot * recent + p % recent) * kv_dim) };
                let key = &keys[at + kvh * hd..][..hd];
                piece.row.iter_mut().zip(key).for_each(|(r, &x)| *r = f16_bits_to_f32(x));
                let heads = q[kvh * group * hd..(kvh + 1) * group * hd].chunks_exact(hd);
                for (g, qh) in heads.enumerate() {
                    piece.scores[g * PIECE_ROWS + p % cap - rows.start] = dot(qh, &piece.row[..hd]) * q_scale;
                }
            }
            if masked {
                for g in 0..group {
                    values.rows().mask_outside(slot, first, pos, rows.start, &mut piece.scores[g * PIECE_ROWS..][..rows.len()]);
                }
            }
            values.softmax_mix(slot, piece);
        });
        self.pieces.merge(used, out);
    }

    fn key_bytes(&self) -> usize {
        self.codes.len() + 2 * (self.sink_keys.len() + self.recent_keys.len()) + self.exact.as_ref().map_or(0, |e| e.key_bytes())
    }

    fn value_bytes(&self) -> usize {
        self.values.bytes() + self.exact.as_ref().map_or(0, |e| e.value_bytes())
    }

    fn value_format(&self) -> ValueFormat {
        self.value_format
    }

    fn shortest_ring(&self) -> Option<usize> {
        let context = self.shape.context;
        let recent = (self.recent > 0 && self.recent < context).then_some(self.recent);
        let exact = self.exact.as_ref().and_then(|e| e.shortest_ring());
        [recent, exact, self.values.rows().shortest_ring(context)].into_iter().flatten().min()
    }

    fn describe(&self) -> String {
        let pq = self.books.shape();
        let mut d = format!("pq{} S={} ({:.1}× smaller than f16 keys)", pq.centroids, pq.subspaces, pq.compression_vs_f16());
        if self.sink + self.recent > 0 {
            d += &format!(" + exact f16 keys of the first {} and last {} positions", self.sink, self.recent);
        }
        let exact = self.slots.iter().filter(|s| matches!(s, Slot::Exact(_))).count();
        if exact > 0 {
            d += &format!("; exact f16 keys in {exact} of {} layers", self.shape.layers);
        }
        d
    }
}
