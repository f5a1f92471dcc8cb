//! The README's example: load a model, generate with a sampler, stream the text.
//! `cargo run --release -p lutra --example story [MODEL]`
use std::io::Write;

use lutra::{Model, SamplerConfig, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // a GGUF (Gemma 3, Llama, Qwen 2/3), or a llama2.c checkpoint with its tokenizer.bin beside it
    let path = std::env::args().nth(1).unwrap_or("models/stories15M/model.bin".into());
    let model = Model::load(&path)?;
    let mut session = model.session(&SessionOptions::default())?;
    let sampler = SamplerConfig { temperature: 0.8, seed: 42, ..SamplerConfig::default() };
    print!("Once upon a time");
    for piece in session.generate("Once upon a time", sampler, 100)? {
        print!("{}", piece?);
        std::io::stdout().flush()?;
    }
    println!();
    Ok(())
}
