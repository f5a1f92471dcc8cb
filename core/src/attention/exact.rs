//! The exact key cache: f16 (or f32) keys, scores as dot products.

use alloc::vec;
use alloc::vec::Vec;

use super::pieces::BATCH_PIECES;
use super::*;

/// How exact keys are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPrecision {
    F16,
    F32,
}

/// Keys kept exactly (f16 or f32): scores are dot products.
pub struct ExactKvCache {
    shape: AttentionShape,
    precision: KeyPrecision,
    keys_f16: Vec<u16>,
    keys_f32: Vec<f32>,
    values: ValueCache,
    pieces: Pieces,
    /// A prompt batch's pieces (`store_and_attend` on several threads), made on first use.
    batch: Pieces,
    /// A prompt batch's pieces of `TOKEN_BLOCK` tokens each (`attend_tokens`), made with
    /// the cache where that path runs (none elsewhere).
    token_blocks: Pieces,
}

impl ExactKvCache {
    pub fn new(shape: AttentionShape, precision: KeyPrecision) -> ExactKvCache {
        ExactKvCache::with_windows(shape, precision, &[])
    }

    /// Layers with `windows[l] > 0` only ever attend to their last `windows[l]` positions
    /// and keep a ring of that many keys and values.
    pub fn with_windows(shape: AttentionShape, precision: KeyPrecision, windows: &[usize]) -> ExactKvCache {
        ExactKvCache::with_values(shape, precision, ValueCache::with_windows(shape, windows))
    }

    /// As `with_windows`, storing values as `format` (refused for a block format where
    /// head_dim is not a multiple of 32).
    pub fn with_value_format(
        shape: AttentionShape,
        precision: KeyPrecision,
        windows: &[usize],
        format: ValueFormat,
    ) -> Result<ExactKvCache, Error> {
        Ok(ExactKvCache::with_values(shape, precision, ValueCache::with_format(shape, windows, format)?))
    }

    pub(crate) fn with_values(shape: AttentionShape, precision: KeyPrecision, values: ValueCache) -> ExactKvCache {
        let n = values.rows().total() * shape.kv_dim();
        let (f16_len, f32_len) = match precision {
            KeyPrecision::F16 => (n, 0),
            KeyPrecision::F32 => (0, n),
        };
        let attends_in_token_blocks = shape.group() == 1
            && precision == KeyPrecision::F16
            && values.format() == ValueFormat::F16
            && kernels::attends_tokens_f16(shape.head_dim);
        ExactKvCache {
            shape,
            precision,
            keys_f16: vec![0; f16_len],
            keys_f32: vec![0.0; f32_len],
            values,
            pieces: Pieces::new(shape),
            batch: Pieces::none(shape),
            token_blocks: Pieces::for_token_blocks(shape, attends_in_token_blocks),
        }
    }

    /// Scores one piece's rows for query `q` (its KV head's group of heads), masks what a
    /// ring holds outside `first..=pos`, and mixes the values.
    #[allow(clippy::too_many_arguments)]
    fn attend_piece(&self, layer: usize, first: usize, pos: usize, masked: bool, q: &[f32], q_scale: f32, piece: &mut AttentionPiece) {
        let s = self.shape;
        let (hd, group) = (s.head_dim, s.group());
        let (kvh, n) = (piece.kv_head, piece.rows.len());
        let q = &q[kvh * group * hd..(kvh + 1) * group * hd];
        let base = self.values.rows().at(&s, layer, kvh, piece.rows.start);
        match self.precision {
            KeyPrecision::F16 => {
                let keys = Rows { data: &self.keys_f16[base..], stride: hd, len: hd, count: n };
                kernels::scores_f16(keys, q, q_scale, &mut piece.row, &mut piece.scores, PIECE_ROWS);
            }
            KeyPrecision::F32 => {
                let keys = Rows { data: &self.keys_f32[base..], stride: hd, len: hd, count: n };
                kernels::scores_f32(keys, q, q_scale, &mut piece.scores, PIECE_ROWS);
            }
        }
        if masked {
            for g in 0..group {
                self.values.rows().mask_outside(layer, first, pos, piece.rows.start, &mut piece.scores[g * PIECE_ROWS..][..n]);
            }
        }
        self.values.softmax_mix(layer, piece);
    }
}

impl ExactKvCache {
    /// Whether a prompt batch's attention in this layer goes by `attend_tokens`: the cache
    /// made its pieces (every query head has its own KV head, so a piece of one token
    /// would convert each key and value row for one query; keys and values are f16; the
    /// CPU has the kernel), there are enough of them, every token attends from the
    /// layer's first row, and each token's rows fit one piece.
    fn attends_in_token_blocks(&self, layer: usize, batch: &PromptBatch<'_>, n: usize) -> bool {
        let s = self.shape;
        let last = batch.first_pos + n.saturating_sub(1);
        n >= 2
            && n.div_ceil(TOKEN_BLOCK) * s.kv_heads <= self.token_blocks.all.len()
            && batch.window.is_none()
            && last < self.values.rows().cap(layer).min(token_block_rows(s.context))
    }

    /// Stores the whole batch, then attends it in one parallel run of pieces of
    /// `TOKEN_BLOCK` consecutive tokens × one KV head: each key and value row is converted
    /// once per block instead of once per token. Each token's output is what
    /// `attend_with` gives it, bit for bit (`kernels::attend_tokens_f16`).
    fn attend_tokens(&mut self, threads: &dyn Parallel, layer: usize, batch: &PromptBatch<'_>, out: &mut [f32]) {
        let s = self.shape;
        let n = batch.tokens(&s, out);
        let (kvd, qd, hd) = (s.kv_dim(), s.q_dim(), s.head_dim);
        for t in 0..n {
            self.store(layer, batch.first_pos + t, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        }
        let used = n.div_ceil(TOKEN_BLOCK) * s.kv_heads;
        for (i, p) in self.token_blocks.all[..used].iter_mut().enumerate() {
            let first = i / s.kv_heads * TOKEN_BLOCK;
            let last = (first + TOKEN_BLOCK).min(n) - 1;
            (p.kv_head, p.token, p.rows) = (i % s.kv_heads, first, 0..batch.first_pos + last + 1);
        }
        let mut pieces = core::mem::take(&mut self.token_blocks.all);
        let this = &*self;
        threads.run_pieces(&mut pieces[..used], &|piece| this.attend_token_block(layer, batch, n, piece));
        for p in &pieces[..used] {
            for (j, t) in (p.token..n).take(TOKEN_BLOCK).enumerate() {
                out[t * qd + p.kv_head * hd..][..hd].copy_from_slice(&p.out[j * hd..][..hd]);
            }
        }
        self.token_blocks.all = pieces;
    }

    /// One piece of `attend_tokens`: its tokens' outputs into `piece.out`, token-major.
    fn attend_token_block(&self, layer: usize, batch: &PromptBatch<'_>, n: usize, piece: &mut AttentionPiece) {
        let s = self.shape;
        let (hd, qd, kvh) = (s.head_dim, s.q_dim(), piece.kv_head);
        let tokens = (n - piece.token).min(TOKEN_BLOCK);
        let mut counts = [0; TOKEN_BLOCK];
        for (j, t) in (piece.token..piece.token + tokens).enumerate() {
            piece.row[j * hd..][..hd].copy_from_slice(&batch.q[t * qd + kvh * hd..][..hd]);
            counts[j] = batch.first_pos + t + 1;
        }
        if let Some(values) = self.values.f16_rows(layer, kvh, piece.rows.len()) {
            let count = piece.rows.len();
            let base = self.values.rows().at(&s, layer, kvh, 0);
            let keys = Rows { data: &self.keys_f16[base..], stride: hd, len: hd, count };
            let (q, out) = (&piece.row[..tokens * hd], &mut piece.out[..tokens * hd]);
            let outputs = (&mut piece.scores[..], out, &mut piece.stats[..]);
            if kernels::attend_tokens_f16(keys, values, q, &counts[..tokens], batch.q_scale, token_block_rows(s.context), outputs) {
                return;
            }
        }
        // where the kernel cannot run: token by token as `attend_with` (the last token
        // first, so that each output moves to its slot before the next is made in slot 0)
        let rows = piece.rows.clone();
        for (j, t) in (piece.token..piece.token + tokens).enumerate().rev() {
            piece.rows = 0..counts[j];
            self.attend_piece(layer, 0, batch.first_pos + t, false, &batch.q[t * qd..][..qd], batch.q_scale, piece);
            piece.out.copy_within(..hd, j * hd);
        }
        piece.rows = rows;
    }
}

impl KvCache for ExactKvCache {
    fn shape(&self) -> AttentionShape {
        self.shape
    }

    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (shape, rows) = (&self.shape, self.values.rows());
        match self.precision {
            KeyPrecision::F16 => rows.store(shape, &mut self.keys_f16, layer, pos, k, kernels::f16_row),
            KeyPrecision::F32 => rows.store(shape, &mut self.keys_f32, layer, pos, k, |x, d| d.copy_from_slice(x)),
        }
        self.values.store(layer, pos, v);
    }

    fn attend_with(&mut self, threads: &dyn Parallel, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        let s = self.shape;
        // checked here, on the caller's thread: a pool would not pass a piece's panic on
        assert!(q.len() == s.q_dim() && out.len() == q.len(), "attention: q and out must hold heads × head_dim values");
        let (rows, masked) = self.values.rows().span(layer, first, pos);
        let used = self.pieces.plan(s.kv_heads, rows);
        let mut pieces = core::mem::take(&mut self.pieces.all);
        let this = &*self;
        threads.run_pieces(&mut pieces[..used], &|piece| this.attend_piece(layer, first, pos, masked, q, q_scale, piece));
        self.pieces.all = pieces;
        self.pieces.merge(used, out);
    }

    /// Stores the whole batch, then attends all its tokens' pieces in one parallel run
    /// (a run of tokens at a time), where the other threads would otherwise wait: fewer
    /// pieces per token than threads. Each token's pieces and merge are `attend_with`'s,
    /// so its output is too; a ring must still hold every position each token attends to
    /// once the batch is stored, else the batch goes token by token.
    fn store_and_attend(&mut self, threads: &dyn Parallel, layer: usize, batch: &PromptBatch<'_>, out: &mut [f32]) {
        let s = self.shape;
        let n = batch.tokens(&s, out);
        let (kvd, qd, first_pos) = (s.kv_dim(), s.q_dim(), batch.first_pos);
        let last = (first_pos + n).saturating_sub(1);
        let cap = self.values.rows().cap(layer);
        if self.attends_in_token_blocks(layer, batch, n) {
            return self.attend_tokens(threads, layer, batch, out);
        }
        let held = last < cap || batch.first_attended(first_pos) + cap > last;
        let per_token = Pieces::count(s.kv_heads, &self.values.rows().span(layer, batch.first_attended(last), last).0);
        if n < 2 || !held || per_token >= threads.threads() {
            return store_and_attend_each(self, threads, layer, batch, out);
        }
        for t in 0..n {
            self.store(layer, first_pos + t, &batch.k[t * kvd..][..kvd], &batch.v[t * kvd..][..kvd]);
        }
        let run = (BATCH_PIECES / per_token.max(1)).max(1);
        for tokens in (0..n).step_by(run).map(|start| start..(start + run).min(n)) {
            // per token of the run: where its pieces start, and its span
            let mut starts = [0; BATCH_PIECES + 1];
            let mut used = 0;
            for (i, t) in tokens.clone().enumerate() {
                starts[i] = used;
                let pos = first_pos + t;
                let (rows, _) = self.values.rows().span(layer, batch.first_attended(pos), pos);
                self.batch.reserve(used + Pieces::count(s.kv_heads, &rows));
                used = self.batch.plan_token(used, t, s.kv_heads, rows);
            }
            starts[tokens.len()] = used;
            let mut pieces = core::mem::take(&mut self.batch.all);
            let this = &*self;
            threads.run_pieces(&mut pieces[..used], &|piece| {
                let pos = first_pos + piece.token;
                let first = batch.first_attended(pos);
                let (_, masked) = this.values.rows().span(layer, first, pos);
                this.attend_piece(layer, first, pos, masked, &batch.q[piece.token * qd..][..qd], batch.q_scale, piece);
            });
            self.batch.all = pieces;
            for (i, t) in tokens.enumerate() {
                self.batch.merge_range(starts[i]..starts[i + 1], &mut out[t * qd..][..qd]);
            }
        }
    }

    fn key_bytes(&self) -> usize {
        2 * self.keys_f16.len() + 4 * self.keys_f32.len()
    }

    fn value_bytes(&self) -> usize {
        self.values.bytes()
    }

    fn value_format(&self) -> ValueFormat {
        self.values.format()
    }

    fn shortest_ring(&self) -> Option<usize> {
        self.values.rows().shortest_ring(self.shape.context)
    }

    fn describe(&self) -> alloc::string::String {
        match self.precision {
            KeyPrecision::F16 => "exact f16".into(),
            KeyPrecision::F32 => "exact f32".into(),
        }
    }
}

#[cfg(test)]
mod batch_tests {
    use super::SingleThread;
    use super::*;

    /// Pieces in reverse order, as if on three threads: a batch's outputs must not
    /// depend on which piece runs first.
    struct Reversed;

    impl Parallel for Reversed {
        fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
            pieces.iter_mut().rev().for_each(job);
        }
        fn threads(&self) -> usize {
            3
        }
    }

    /// A batch attended at once (stores first, every token's pieces in one run) gives what
    /// storing and attending token by token gives, bit for bit: global and sliding-window
    /// layers, batches before, across and after a ring's wrap, one to thirteen tokens.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn a_batch_at_once_equals_token_by_token() {
        // grouped-query attention; and a KV head per query head, whose batches without a
        // window go by `attend_tokens` (layer 0; layer 1 has a window)
        for shape in [
            AttentionShape { layers: 2, heads: 4, kv_heads: 1, head_dim: 16, context: 48 },
            AttentionShape { layers: 2, heads: 3, kv_heads: 3, head_dim: 48, context: 48 },
        ] {
            batch_equals_token_by_token(shape);
        }
    }

    fn batch_equals_token_by_token(shape: AttentionShape) {
        let (kvd, qd, window) = (shape.kv_dim(), shape.q_dim(), 8);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect()
        };
        let (k, v, q) = (values(shape.context * kvd), values(shape.context * kvd), values(shape.context * qd));
        let windows = [0, window];
        let mut one = ExactKvCache::with_windows(shape, KeyPrecision::F16, &windows);
        let mut batched = ExactKvCache::with_windows(shape, KeyPrecision::F16, &windows);
        let mut first_pos = 0;
        for n in [1, 5, 3, 13, 2, 7, 1, 9, 4] {
            for (layer, &w) in windows.iter().enumerate() {
                let window = (w > 0).then_some(w);
                let at = |x: &[f32], d: usize| x[first_pos * d..(first_pos + n) * d].to_vec();
                let (k, v, q) = (at(&k, kvd), at(&v, kvd), at(&q, qd));
                let batch = PromptBatch { first_pos, window, k: &k, v: &v, q: &q, q_scale: 0.25 };
                let (mut want, mut got) = (vec![0.0; n * qd], vec![0.0; n * qd]);
                store_and_attend_each(&mut one, &SingleThread, layer, &batch, &mut want);
                let token_blocks = shape.group() == 1 && layer == 0 && n >= 2 && kernels::attends_tokens_f16(shape.head_dim);
                assert_eq!(batched.attends_in_token_blocks(layer, &batch, n), token_blocks);
                batched.store_and_attend(&Reversed, layer, &batch, &mut got);
                assert!(want.iter().all(|x| x.is_finite()));
                let bits = |x: &[f32]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "layer {layer}, tokens {first_pos}..{}", first_pos + n);
            }
            first_pos += n;
        }
        assert_eq!(first_pos, 45);
    }
}
