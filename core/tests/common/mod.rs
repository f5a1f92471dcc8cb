//! What several test files of lutra-core share: deterministic, dependency-free
//! randomness (splitmix64) and a GGUF writer for model files. Each file uses a subset of
//! the helpers.
#![allow(dead_code)]

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (sum of 4 uniforms), mean 0, variance 1.
    pub fn normal(&mut self) -> f32 {
        ((0..4).map(|_| self.uniform()).sum::<f32>() - 2.0) * 1.732_050_8
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
    /// `n` logits uniform in [−scale/2, scale/2).
    pub fn logits(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| (self.uniform() - 0.5) * scale).collect()
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub mod gguf_writer;
pub mod llama2c_files;
pub mod tiny_bpe;
pub mod tiny_gemma;
pub mod tiny_llama;
