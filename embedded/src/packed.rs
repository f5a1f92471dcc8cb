//! A packed `.lutra` model read in place from bytes that live as long as the program
//! (`include_bytes!` in a bare-metal image, a flash address), and the generation loop
//! every Pi front-end shares: refuse what does not fit, prefill, then stream tokens with
//! the arena sealed.

use alloc::sync::Arc;
use core::fmt;

use lutra_core::engine::budget::Shortfall;
use lutra_core::engine::{Error, Gemv, Generation, Lent, Model, Session};
use lutra_core::formats::gguf::Gguf;
use lutra_core::formats::pack;
use lutra_core::Backing;

use crate::budget;

/// Why a model did not run.
#[derive(Debug)]
pub enum Refusal {
    /// A GGUF file that is not packed: `lutra pack` makes one.
    NotPacked,
    /// The file is damaged, truncated, of another version, or unsupported.
    Model(Error),
    /// The session would not fit the memory left.
    TooBig(Shortfall),
    /// Importing the model (its tokenizer) would not fit the memory left.
    ImportTooBig { needed: usize, available: usize },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotPacked => f.write_str("not a packed .lutra model (make one with `lutra pack -m MODEL -o FILE.lutra`)"),
            Refusal::Model(e) => write!(f, "{e}"),
            Refusal::TooBig(s) => write!(f, "the model does not fit: {s}"),
            Refusal::ImportTooBig { needed, available } => write!(
                f,
                "the model does not fit: importing it (its tokenizer) needs up to {needed} bytes ({:.2} MiB); {available} bytes ({:.2} MiB) are free",
                *needed as f64 / (1 << 20) as f64,
                *available as f64 / (1 << 20) as f64
            ),
        }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Model(e)
    }
}

struct Static(&'static [u8]);

impl Backing for Static {
    fn bytes(&self) -> &[u8] {
        self.0
    }
}

/// The packed model in `file`, its matrices read in place (checked against their
/// checksums as they are lent), refused before anything is imported when importing
/// could need more than `free` bytes. `file` must start 64-byte aligned.
pub fn load_static(file: &'static [u8], free: usize) -> Result<Model, Refusal> {
    let gguf = Gguf::parse(file).map_err(|e| Refusal::Model(e.into()))?;
    check_packed(&gguf, free)?;
    Ok(Model::from_gguf_source(&gguf, &mut Lent(Arc::new(Static(file))), |_| {})?)
}

/// A packed file whose import fits in `free` bytes (by its header; the import itself
/// checks everything else).
pub fn check_packed(gguf: &Gguf<'_>, free: usize) -> Result<(), Refusal> {
    if !pack::is_packed(gguf) {
        return Err(Refusal::NotPacked);
    }
    match import_bound(gguf) {
        Some(needed) if needed > free => Err(Refusal::ImportTooBig { needed, available: free }),
        Some(needed) => {
            crate::info!("packed model: import needs up to {} bytes of {} free", needed, free);
            Ok(())
        }
        None => Ok(()),
    }
}

/// [`budget::import_bytes`] of a packed file, from its header: the vocabulary's size and
/// bytes (a GGUF token list, or a llama2.c tokenizer blob: per token a score, a length
/// and the bytes), its BPE merges and the layer count. `None` when the header lacks them (the import
/// then refuses the file itself).
pub fn import_bound(gguf: &Gguf<'_>) -> Option<usize> {
    let arch = gguf.get_str("general.architecture")?;
    let layers = gguf.get_u32(&alloc::format!("{arch}.block_count"))? as usize;
    let (vocab, token_bytes) = match gguf.get_array("tokenizer.ggml.tokens") {
        Some(tokens) => {
            let vocab = usize::try_from(tokens.len()).ok()?;
            (vocab, tokens.bytes().len().checked_sub(8 * vocab)?)
        }
        None => {
            let blob = gguf.tensor(lutra_core::arch::llama::TOKENIZER_BLOB)?;
            let vocab = gguf.get_u32("llama.vocab_size")? as usize;
            (vocab, usize::try_from(blob.byte_size().ok()?).ok()?.saturating_sub(8 * vocab + 4))
        }
    };
    let merges = gguf.get_array(lutra_core::tokenizer::bpe::KEY_MERGES).map_or(Some(0), |m| usize::try_from(m.len()).ok())?;
    Some(budget::import_bytes_for(vocab, token_bytes, merges, layers))
}

/// Bytes a session of `context` positions of `model` needs (an upper bound, from its
/// hyperparameters), or the shortfall when `free` bytes are not enough.
pub fn check_fits(model: &Model, context: usize, free: usize) -> Result<usize, Shortfall> {
    let needed = model.dims().session_bytes(context);
    if needed > free {
        return Err(Shortfall { needed, available: free, context });
    }
    crate::info!("session of {} positions: budget {} bytes of {} free", context, needed, free);
    Ok(needed)
}

/// Streams `generation`'s tokens to `emit` until it stops; `seal(true)` before the first
/// step and `seal(false)` after the last bracket the loop (an arena refuses every
/// allocation in between). Returns how many tokens were generated.
pub fn stream<G: Gemv>(
    generation: &mut Generation,
    session: &mut Session,
    gemv: &G,
    seal: impl Fn(bool),
    mut emit: impl FnMut(&str),
) -> Result<usize, Error> {
    seal(true);
    let result = (|| -> Result<(), Error> {
        // the text's leftover too: TextStream writes it into memory it already has
        while let Some(piece) = generation.next_piece(session, gemv)? {
            emit(piece);
        }
        Ok(())
    })();
    seal(false);
    result?;
    Ok(generation.generated())
}
