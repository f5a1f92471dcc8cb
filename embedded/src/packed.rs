//! A packed `.lutra` model read in place from bytes that live as long as the program
//! (`include_bytes!` in a bare-metal image, a flash address), and the generation loop
//! every Pi front-end shares: refuse what does not fit, prefill, then stream tokens with
//! the arena sealed.

use alloc::sync::Arc;
use core::fmt;

use lutra_core::engine::budget::Shortfall;
use lutra_core::engine::{Error, Gemv, Generation, Lent, Model, Session};
use lutra_core::gguf::Gguf;
use lutra_core::{pack, Backing};

/// Why a model did not run.
#[derive(Debug)]
pub enum Refusal {
    /// A GGUF file that is not packed: `lutra pack` makes one.
    NotPacked,
    /// The file is damaged, truncated, of another version, or unsupported.
    Model(Error),
    /// The session would not fit the memory left.
    TooBig(Shortfall),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotPacked => f.write_str("not a packed .lutra model (make one with `lutra pack -m MODEL -o FILE.lutra`)"),
            Refusal::Model(e) => write!(f, "{e}"),
            Refusal::TooBig(s) => write!(f, "the model does not fit: {s}"),
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
/// checksums as they are lent). `file` must start 64-byte aligned.
pub fn load_static(file: &'static [u8]) -> Result<Model, Refusal> {
    let gguf = Gguf::parse(file).map_err(|e| Refusal::Model(e.into()))?;
    if !pack::is_packed(&gguf) {
        return Err(Refusal::NotPacked);
    }
    Ok(Model::from_gguf_source(&gguf, &mut Lent(Arc::new(Static(file))), |_| {})?)
}

/// Bytes a session of `context` positions of `model` needs (an upper bound, from its
/// hyperparameters), or the shortfall when `free` bytes are not enough.
pub fn check_fits(model: &Model, context: usize, free: usize) -> Result<usize, Shortfall> {
    let needed = model.dims().session_bytes(context);
    if needed > free {
        return Err(Shortfall { needed, available: free, context });
    }
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
        while let Some(token) = generation.step(session, gemv)? {
            emit(token.text);
        }
        Ok(())
    })();
    seal(false);
    result?;
    emit(generation.finish_text());
    Ok(generation.generated())
}
