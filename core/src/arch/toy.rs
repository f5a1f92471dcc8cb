//! A toy architecture, for tests only: what adding one takes is this file and one line in
//! the registry (`super`'s `registry!`). Its forward pass is a bigram model, the next
//! token's logits a 4-bit lookup product of the current token's embedding; the test
//! loads it from a GGUF file through the registry, runs it through a session's calls, and
//! checks its logits against f64 arithmetic.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::{ArchState, Architecture, State};
use crate::attention::KvCache;
use crate::formats::gguf::Gguf;
use crate::formats::import::{meta_u32, vector, Imported, TensorSource};
use crate::model::budget;
use crate::model::{Gemv, Hparams, ModelError, TablePrecision};
use crate::{AlignedBytes, Offset, OwnedTables, PackedMatrix};

pub(crate) const NAME: &str = "toy-bigram";
const BITS: u8 = 4;

pub(crate) struct Toy {
    dim: usize,
    vocab: usize,
    embedding: Vec<f32>,
    head: PackedMatrix<AlignedBytes>,
}

/// A sequence's state: the generic one, with one token's tables as its working buffers.
pub(crate) type ToyState = State<OwnedTables>;

impl Architecture for Toy {
    type State = ToyState;

    fn runs_gguf(name: &str) -> bool {
        name == NAME
    }
    fn from_gguf(gguf: &Gguf<'_>, source: &mut dyn TensorSource, progress: &mut dyn FnMut(Imported<'_>)) -> Result<Self, ModelError> {
        let dim = meta_u32(gguf, "toy-bigram.embedding_length")?;
        let vocab = meta_u32(gguf, "toy-bigram.vocab_size")?;
        let embedding = vector(gguf, source, "token_embd.weight", vocab * dim)?;
        progress(Imported { done: 1, total: 2, tensor: "token_embd.weight", consumed: None });
        let head = PackedMatrix::quantize(&vector(gguf, source, "output.weight", vocab * dim)?, vocab, dim, BITS, 32, Offset::Min)?;
        progress(Imported { done: 2, total: 2, tensor: "output.weight", consumed: None });
        Ok(Toy { dim, vocab, embedding, head })
    }
    fn name(&self) -> &'static str {
        NAME
    }
    fn hparams(&self) -> Hparams {
        let (dim, vocab_size) = (self.dim, self.vocab);
        Hparams { dim, hidden_dim: dim, layers: 1, heads: 1, kv_heads: 1, head_dim: dim, vocab_size, context_length: 64 }
    }
    fn dims(&self) -> budget::Dims {
        budget::Dims { buffers: budget::Buffers::llama(1, 0), hparams: self.hparams(), token_bytes: 0, merges: 0 }
    }
    fn matrix_bytes(&self) -> usize {
        self.head.as_bytes().len()
    }
    fn matrix_buffers_mut(&mut self) -> Vec<&mut AlignedBytes> {
        vec![self.head.data_mut()]
    }
    fn layer_windows(&self) -> Vec<usize> {
        vec![0]
    }
    fn new_state(&self, cache: Box<dyn KvCache>, _tables: TablePrecision) -> Result<ToyState, ModelError> {
        State::for_model(self, cache, || Ok(OwnedTables::new(self.dim, 32)?))
    }
    fn forward<'s, G: Gemv>(&self, gemv: &G, s: &'s mut ToyState, token: u32, pos: usize) -> Result<&'s [f32], ModelError> {
        self.feed_batch(gemv, s, &[token], pos)?;
        let x = &self.embedding[token as usize * self.dim..][..self.dim];
        let tables = s.batch.build(x)?;
        gemv.gemv(&self.head, tables, &mut s.logits)?;
        Ok(&s.logits)
    }
    fn feed_batch<G: Gemv>(&self, _: &G, s: &mut ToyState, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
        // a bigram looks at no earlier position; the cache holds each token's embedding
        crate::model::feed_in_batches(tokens, first_pos, s.context(), self.vocab, |piece, first| {
            for (i, &t) in piece.iter().enumerate() {
                let x = &self.embedding[t as usize * self.dim..][..self.dim];
                s.cache.store(0, first + i, x, x);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Network;
    use crate::attention::{ExactKvCache, KeyPrecision};
    use crate::formats::import::InMemory;
    use crate::model::SingleThread;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
    }

    /// Loaded through the registry from a GGUF file, run as a session runs it: the logits
    /// are the 4-bit head's product with the token's embedding, within the 4-bit
    /// quantization's error of f64 arithmetic over the unquantized weights.
    #[test]
    fn a_registered_toy_runs_through_the_engine_seam() {
        let (dim, vocab) = (64, 48);
        let (embedding, head) = (values(vocab * dim, 7), values(vocab * dim, 11));
        let mut w = crate::formats::pack::Writer::new();
        w.str("general.architecture", NAME);
        w.u32("toy-bigram.embedding_length", dim as u32);
        w.u32("toy-bigram.vocab_size", vocab as u32);
        w.f32s("token_embd.weight", &embedding);
        w.f32s("output.weight", &head);
        let mut file = Vec::new();
        w.finish(|b| {
            file.extend_from_slice(b);
            Ok::<(), ()>(())
        })
        .unwrap();
        let gguf = Gguf::parse(&file).unwrap();
        assert!(Network::runs_gguf(NAME) && !Network::runs_gguf("toy-trigram"));
        let mut reported = 0;
        let net = Network::from_gguf(NAME, &gguf, &mut InMemory(&file), &mut |_| reported += 1).unwrap().unwrap();
        assert_eq!((reported, net.dims().hparams.vocab_size, net.layer_windows()), (2, vocab, vec![0]));
        let shape = net.attention_shape(16);
        let mut state = net.new_state(Box::new(ExactKvCache::new(shape, KeyPrecision::F16)), TablePrecision::Auto).unwrap();
        net.feed_batch(&SingleThread, &mut state, &[3, 5], 0).unwrap();
        net.forward(&SingleThread, &mut state, 9, 2).unwrap();
        let x = &embedding[9 * dim..][..dim];
        let (mut err, mut norm) = (0.0, 0.0);
        for (v, &got) in state.logits().iter().enumerate() {
            let want: f64 = head[v * dim..][..dim].iter().zip(x).map(|(&w, &x)| w as f64 * x as f64).sum();
            (err, norm) = (err + (got as f64 - want).powi(2), norm + want * want);
        }
        // 4-bit weights and int8 tables stay far under 1 %; another token's logits give 53 %
        assert!(err / norm < 0.01, "normalized squared error {}", err / norm);
        // positions past the context are refused, as for every architecture
        assert!(net.feed_batch(&SingleThread, &mut state, &[1; 14], 3).is_err());
    }
}
