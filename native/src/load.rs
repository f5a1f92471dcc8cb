//! Model files into engine models: mapped, not read; a GGUF's pages released as each
//! tensor is imported, so the mapped file and the imported weights are never both
//! resident in full.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lutra_core::engine::{self, InMemory, Lent, LoadProgress};
use lutra_core::formats::gguf::{is_gguf, Gguf, TensorInfo};
use lutra_core::formats::import::{self, weight_bytes_needed, TensorSource, Weights};
use lutra_core::formats::pack;
use lutra_core::model::ModelError;
use lutra_core::Backing;
use memmap2::Mmap;

use crate::import_cache;
use crate::inspect::map_file;
use crate::progress::Progress;
use crate::Error;
use crate::MemoryLimit;

/// How to load a model file.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// A llama2.c checkpoint's `tokenizer.bin`, when it is not beside the checkpoint.
    pub tokenizer: Option<PathBuf>,
    /// Bits per weight that a llama2.c checkpoint's f32 weights are quantized to (1..=8).
    /// GGUF tensors are imported as they are stored.
    pub bits: u8,
    /// A progress bar on stderr while the weights import.
    pub progress: bool,
    /// The most memory the weights and a session may take, in bytes (`None`: the
    /// machine's physical memory). A model over it is refused before loading.
    pub max_memory: Option<u64>,
    /// Threads that convert a GGUF file's matrices (`None`: one per core). The import is
    /// the same on any count.
    pub import_threads: Option<usize>,
    /// A directory where a GGUF file's imported weights are kept as a `.lutra` file and read
    /// in place on later loads of the same file ([`crate::import_cache`]; `None`: off).
    /// [`crate::import_cache::default_dir`] is the CLI's.
    pub import_cache: Option<PathBuf>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { tokenizer: None, bits: 4, progress: false, max_memory: None, import_threads: None, import_cache: None }
    }
}

/// Loads a GGUF file (by its magic) or a llama2.c checkpoint.
pub(crate) fn load(path: &Path, opts: &LoadOptions, limit: Option<MemoryLimit>) -> Result<engine::Model, Error> {
    let map = map_file(path).map_err(Error::Open)?;
    let in_file = |e: engine::Error| Error::Model { path: path.to_path_buf(), source: e };
    // llama2.c checkpoints have no magic: a file named as GGUF is read as one, so a
    // damaged header is reported as such rather than as a checkpoint without tokenizer
    let named_gguf = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf") || e.eq_ignore_ascii_case("lutra"));
    if is_gguf(&map) || named_gguf {
        let file = Arc::new(MappedFile(map));
        let gguf = Gguf::parse(file.bytes()).map_err(|e| in_file(e.into()))?;
        let needed = weight_bytes_needed(&gguf).map_err(|e| in_file(e.into()))?;
        if let Some(limit) = limit.filter(|l| needed > l.bytes) {
            return Err(Error::OutOfMemory { what: format!("{}: its weights", path.display()), needed, limit, fitting_context: None });
        }
        if pack::is_packed(&gguf) {
            return load_packed(&gguf, &file, opts.progress).map(gathered).map_err(in_file);
        }
        let runs = gguf.get_str("general.architecture").is_some_and(engine::runs_architecture);
        let cache = opts.import_cache.as_deref().filter(|_| runs).and_then(|dir| import_cache::Entry::for_file(dir, path, &gguf));
        if let Some(entry) = cache.as_ref().filter(|e| e.exists()) {
            match load_cached(entry, opts.progress) {
                Ok(model) => return Ok(gathered(model)),
                // damaged, or written by another build: imported again below and replaced
                Err(e) => {
                    eprintln!("lutra: the import cache's {} is unusable ({e}); importing {} again", entry.path().display(), path.display());
                    entry.remove();
                }
            }
        }
        let threads = opts.import_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let bar = Mutex::new(Bar::new(opts.progress, "importing tensors".into()));
        // a file the engine refuses is refused before any conversion
        let ready = if runs { import_ahead(&gguf, &file.0, threads.max(1), &bar) } else { HashMap::new() };
        bar.into_inner().unwrap_or_else(|e| e.into_inner()).finish(true);
        let mut source = ImportedAhead { file: InMemory(file.bytes()), ready };
        let model = engine::Model::from_gguf_source(&gguf, &mut source, |p| {
            if let Some(range) = p.consumed.clone() {
                release(&file.0, range);
            }
        })
        .map_err(in_file)?;
        if let Some(entry) = cache {
            save_to_cache(&entry, &model, file.bytes(), opts.progress);
        }
        return Ok(gathered(model));
    }
    let tokenizer_path = opts.tokenizer.clone().unwrap_or_else(|| path.parent().unwrap_or(Path::new(".")).join("tokenizer.bin"));
    let tokenizer = map_file(&tokenizer_path).map_err(Error::Open)?;
    let mut bar = Bar::new(opts.progress, format!("quantizing to {} bits", opts.bits));
    let model = engine::Model::from_llama2c_with_progress(&map, &tokenizer, opts.bits, |p| bar.update(&p));
    bar.finish(model.is_ok());
    model.map(gathered).map_err(|e| match e {
        engine::Error::Tokenizer(_) => Error::Model { path: tokenizer_path, source: e },
        e => in_file(e),
    })
}

/// A packed `.lutra` file: its matrices are read in place from the mapping, kept for as
/// long as the model lives.
fn load_packed(gguf: &Gguf<'_>, file: &Arc<MappedFile>, progress: bool) -> Result<engine::Model, engine::Error> {
    let mut bar = Bar::new(progress, "checking tensors".into());
    let model = engine::Model::from_gguf_source(gguf, &mut Lent(file.clone()), |p| bar.update(&p));
    bar.finish(model.is_ok());
    model
}

/// The import cache's entry, loaded as the packed file it is.
fn load_cached(entry: &import_cache::Entry, progress: bool) -> Result<engine::Model, String> {
    if progress {
        eprintln!("lutra: reading the imported weights kept in {}", entry.path().display());
    }
    let file = Arc::new(MappedFile(map_file(entry.path()).map_err(|e| e.to_string())?));
    let gguf = Gguf::parse(file.bytes()).map_err(|e| e.to_string())?;
    if !pack::is_packed(&gguf) {
        return Err("not a packed file".into());
    }
    load_packed(&gguf, &file, progress).map_err(|e| e.to_string())
}

/// Writes `model` (imported from GGUF bytes `origin`) to the import cache, saying where;
/// a failure (a full disk, a read-only cache) is only reported: the model is loaded.
fn save_to_cache(entry: &import_cache::Entry, model: &engine::Model, origin: &[u8], progress: bool) {
    let t = std::time::Instant::now();
    match entry.save(model, origin) {
        Ok(bytes) if progress => eprintln!(
            "lutra: kept the imported weights in {} ({}, {:.2} s); later loads of this file read them in place \
             (--no-import-cache or {}=off: not kept)",
            entry.path().display(),
            crate::memory::human(bytes),
            t.elapsed().as_secs_f64(),
            import_cache::ENV
        ),
        Ok(_) => {}
        Err(e) => eprintln!("lutra: could not keep the imported weights in the import cache: {e}"),
    }
}

/// `model` with its matrices too small for huge pages of their own moved into one
/// allocation, which `HugePageAllocator` asks huge pages for
/// (`engine::Model::gather_weights`); larger ones have theirs already.
fn gathered(mut model: engine::Model) -> engine::Model {
    model.gather_weights(crate::hugepage::HUGE);
    model
}

/// Every matrix of a GGUF file that the import converts (the architectures take every one
/// of them; one an architecture does not take is converted and dropped at the end of the
/// load), converted on `threads` threads
/// (largest first, so the last to finish is a small one) before the architecture asks
/// for them, each one's pages of the mapped file released once it is done. Each result,
/// error or matrix, is what `import::weights` gives on one thread; the architecture then
/// takes them in its own order through [`ImportedAhead`], so which error a bad file
/// reports does not change either.
fn import_ahead(gguf: &Gguf<'_>, map: &Mmap, threads: usize, bar: &Mutex<Bar>) -> HashMap<String, Result<Weights, ModelError>> {
    // the tensor `import::weights` reads for a name is the first of that name
    let mut seen = HashSet::new();
    let mut matrices: Vec<TensorInfo<'_>> = gguf.tensors().filter(|t| seen.insert(t.name) && import::imported_bytes(t).is_some()).collect();
    matrices.sort_by_key(|t| std::cmp::Reverse(t.byte_size().unwrap_or(0)));
    let next = AtomicUsize::new(0);
    let ready = Mutex::new(HashMap::with_capacity(matrices.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.min(matrices.len()) {
            scope.spawn(|| {
                while let Some(t) = matrices.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // each piece read (offsets within the tensor's data) released as it is done
                    let start = gguf.tensor_range(t).map_or(0, |r| r.start as usize);
                    let matrix = import::weights(gguf, &mut InMemory(map), t.name, None, |piece| {
                        release(map, start + piece.start..start + piece.end);
                    });
                    let done = {
                        let mut ready = ready.lock().unwrap_or_else(|e| e.into_inner());
                        ready.insert(t.name.to_owned(), matrix);
                        ready.len()
                    };
                    let progress = LoadProgress { done, total: matrices.len(), tensor: t.name, consumed: None, finished: true };
                    bar.lock().unwrap_or_else(|e| e.into_inner()).update(&progress);
                }
            });
        }
    });
    ready.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The mapped GGUF file with the matrices [`import_ahead`] converted, each handed to the
/// architecture once.
struct ImportedAhead<'f> {
    file: InMemory<'f>,
    ready: HashMap<String, Result<Weights, ModelError>>,
}

impl TensorSource for ImportedAhead<'_> {
    fn read(&mut self, range: std::ops::Range<u64>) -> Result<&[u8], ModelError> {
        self.file.read(range)
    }

    fn take_imported(&mut self, name: &str) -> Option<Result<Weights, ModelError>> {
        self.ready.remove(name)
    }
}

/// A mapped file that matrices borrow from.
struct MappedFile(Mmap);

impl Backing for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Drops `range` of the mapped file from memory. Any later read of it faults the pages
/// back in from the file with the same contents, so borrows of the map stay valid; a
/// failure just leaves the pages resident.
fn release(map: &Mmap, range: std::ops::Range<usize>) {
    // SAFETY: `map` is a read-only file mapping; MADV_DONTNEED only drops pages.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len()) };
}

/// The load's progress bar, drawn once a tensor or matrix is done.
struct Bar {
    on: bool,
    label: String,
    bar: Option<Progress>,
}

impl Bar {
    fn new(on: bool, label: String) -> Bar {
        Bar { on, label, bar: None }
    }
    fn update(&mut self, p: &LoadProgress<'_>) {
        if self.on && p.finished {
            let label = &self.label;
            self.bar.get_or_insert_with(|| Progress::new(label.clone(), p.total)).update(p.done, p.tensor);
        }
    }
    /// Ends the bar; a load that failed reports nothing done.
    fn finish(&mut self, succeeded: bool) {
        match self.bar.as_mut() {
            Some(bar) if succeeded => bar.finish(),
            Some(bar) => bar.abandon(),
            None => {}
        }
    }
}
