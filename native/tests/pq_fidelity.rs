//! NoMAD PQ scores against exact scores on real keys and queries: each model runs with
//! exact attention over a text, codebooks are trained on the first three quarters of the
//! positions, and every layer's PQ scores are compared with the exact ones on the last
//! quarter (`lutra calibrate` prints the same table). Models come from `cargo xtask models`.

use std::path::PathBuf;

use lutra::calibrate::{calibrate, fidelity_table, CalibrateOptions, Calibrated, KeyTransform, LayerFidelity};
use lutra::core::pq::Rotation;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(model: &str, text: &str, configs: Vec<(usize, usize)>, ctx: usize, keys: usize) -> Vec<Calibrated> {
    let opts = lutra::LoadOptions { bits: 8, ..Default::default() };
    let model = lutra::Model::load_with(root().join(model), &opts).unwrap_or_else(|e| panic!("{e}\n  run `cargo xtask models all` first"));
    let text = std::fs::read_to_string(text).unwrap();
    let opts = CalibrateOptions {
        configs,
        rotation: Rotation::None,
        ctx,
        keys,
        iterations: 20,
        threads: 2,
        key_transform: KeyTransform::Opq,
        recording: None,
    };
    calibrate(&model, &text, &opts).unwrap()
}

fn check(name: &str, c: &Calibrated, min_pearson: f64, min_spearman: f64) {
    println!("{name}, {}:\n{}", c.books.shape(), fidelity_table(&c.fidelity));
    assert!(!c.fidelity.is_empty());
    for (layer, f) in c.fidelity.iter().enumerate() {
        let LayerFidelity { pearson, spearman, .. } = *f;
        assert!(pearson >= min_pearson && spearman >= min_spearman, "{name} layer {layer}: pearson {pearson:.4}, spearman {spearman:.4}");
    }
}

/// stories15M (head_dim 48), 4-bit codes over pairs (8× smaller keys) and 8-bit codes
/// over pairs (4×), on the repo's fixed story text. Minutes unoptimized (k-means): release only.
#[test]
#[cfg_attr(debug_assertions, ignore = "minutes unoptimized: `cargo xtask test host` runs it with --release")]
fn stories15m_pq_scores_follow_exact_scores() {
    let text = root().join("bench/text/stories.txt");
    let out = run("models/stories15M/model.bin", text.to_str().unwrap(), vec![(24, 16), (24, 256)], 256, 4096);
    check("stories15M pq16 S=24", &out[0], 0.95, 0.93);
    check("stories15M pq256 S=24", &out[1], 0.97, 0.96);
}

/// Gemma 3 270M (head_dim 256, QK-norm), 8× smaller keys both ways, on a license text
/// other than the one perplexity is measured on. Minutes unoptimized: release only.
#[test]
#[cfg_attr(debug_assertions, ignore = "minutes unoptimized: `cargo xtask test host` runs it with --release")]
fn gemma3_pq_scores_follow_exact_scores() {
    let out = run("models/gemma-3-270m-q4_k_m.gguf", "/usr/share/common-licenses/GFDL-1.3", vec![(128, 16), (64, 256)], 1024, 2048);
    check("Gemma 3 pq16 S=128", &out[0], 0.85, 0.83);
    check("Gemma 3 pq256 S=64", &out[1], 0.90, 0.88);
}
