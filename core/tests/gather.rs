//! `Model::gather_weights` moves matrices into one allocation; a model must compute
//! the same logits, bit for bit, before and after, on every architecture and storage.

mod common;
use common::gguf_writer::write_gguf;
use common::llama2c_files::tiny_checkpoint_and_tokenizer;
use common::tiny_gemma::{meta_270m, tensors, with_tokenizer};
use common::tiny_llama::VARIANTS;

use lutra_core::engine::{Attention, Model, Session, SingleThread};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Logits after each of a few tokens (prefill of two, then two single steps).
fn logits(model: &Model) -> Vec<Vec<f32>> {
    let mut session = Session::new(model, 8, &Attention::Exact).unwrap();
    session.feed(&SingleThread, &[model.bos(), 3]).unwrap();
    let mut out = vec![session.logits(&SingleThread).unwrap().to_vec()];
    for token in [4, 5] {
        out.push(session.forward(&SingleThread, token).unwrap().to_vec());
    }
    out
}

fn gathers_without_changing_logits(name: &str, mut model: Model) {
    let before = logits(&model);
    // a clone shares the weights: nothing may move under it
    let clone = model.clone();
    assert_eq!(model.gather_weights(usize::MAX), 0, "{name}: moved weights a clone shares");
    drop(clone);
    let moved = model.gather_weights(usize::MAX);
    assert!(moved >= model.info().matrix_bytes / 2, "{name}: moved {moved} of {} matrix bytes", model.info().matrix_bytes);
    let after = logits(&model);
    for (step, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(b.iter().zip(a).all(|(b, a)| b.to_bits() == a.to_bits()), "{name}: logits of step {step} changed");
    }
    assert_eq!(model.gather_weights(usize::MAX), 0, "{name}: moved again");
}

#[test]
fn gathered_weights_give_the_same_logits() {
    let gemma = write_gguf(&with_tokenizer(meta_270m(2)), &tensors(2, 7));
    gathers_without_changing_logits("gemma3", Model::from_gguf(&gemma).unwrap());
    for v in VARIANTS {
        gathers_without_changing_logits(v.name, Model::from_gguf(&v.gguf()).unwrap());
    }
    let (checkpoint, tokenizer) = tiny_checkpoint_and_tokenizer();
    let model = Model::from_llama2c(&checkpoint, &tokenizer, 4).unwrap();
    gathers_without_changing_logits("llama2c", model);
}
