//! Model bytes from JS: a whole file received in chunks ([`ModelFile`]), or pieces of a
//! file read on demand through a JS function (`JsSource`), so wasm memory never holds a
//! giant JS `ArrayBuffer` copy.

use core::ops::Range;

use lutra_core::engine::TensorSource;
use lutra_core::model::ModelError;
use wasm_bindgen::prelude::*;

/// A model file's bytes, received in chunks.
#[wasm_bindgen]
pub struct ModelFile {
    pub(crate) bytes: Vec<u8>,
    expected: usize,
}

#[wasm_bindgen]
impl ModelFile {
    /// Room for a file of `size` bytes, reserved at once: a file that cannot fit in
    /// wasm memory is refused here, before any byte is downloaded.
    #[wasm_bindgen(constructor)]
    pub fn new(size: usize) -> Result<ModelFile, JsError> {
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size)
            .map_err(|_| JsError::new(&format!("out of memory: a model file of {} MiB does not fit in this page's memory", size >> 20)))?;
        Ok(ModelFile { bytes, expected: size })
    }

    /// Appends the next chunk of the file.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsError> {
        if self.bytes.len() + chunk.len() > self.expected {
            return Err(JsError::new(&format!("the file is longer than the {} bytes announced", self.expected)));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes received so far.
    pub fn received(&self) -> usize {
        self.bytes.len()
    }
}

/// Pieces of a file read through a JS function `(offset, length) → Uint8Array`.
pub(crate) struct JsSource {
    read: js_sys::Function,
    piece: Vec<u8>,
}

impl JsSource {
    /// Pieces read through `read(offset, length) → Uint8Array`.
    pub(crate) fn new(read: js_sys::Function) -> JsSource {
        JsSource { read, piece: Vec::new() }
    }
}

impl TensorSource for JsSource {
    fn read(&mut self, range: Range<u64>) -> Result<&[u8], ModelError> {
        let failed = |reason: String| ModelError::Read { start: range.start, end: range.end, reason };
        let len = usize::try_from(range.end - range.start).map_err(|_| failed("too large".into()))?;
        let got = self
            .read
            .call2(&JsValue::NULL, &JsValue::from(range.start as f64), &JsValue::from(len as f64))
            .map_err(|e| failed(e.as_string().or_else(|| js_sys::Error::from(e).message().as_string()).unwrap_or_default()))?;
        let array = got.dyn_into::<js_sys::Uint8Array>().map_err(|_| failed("the reader did not return a Uint8Array".into()))?;
        if array.length() as usize != len {
            return Err(failed(format!("got {} bytes (truncated file?)", array.length())));
        }
        self.piece.clear();
        self.piece.try_reserve(len).map_err(|_| failed(format!("out of memory for a piece of {} MiB", len >> 20)))?;
        self.piece.resize(len, 0);
        array.copy_to(&mut self.piece);
        Ok(&self.piece)
    }
}

/// An error unless `file` holds every byte it was announced with.
pub(crate) fn complete(file: &ModelFile, what: &str) -> Result<(), JsError> {
    if file.bytes.len() != file.expected {
        return Err(JsError::new(&format!("{what}: received {} of {} bytes", file.bytes.len(), file.expected)));
    }
    Ok(())
}
