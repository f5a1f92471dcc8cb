//! The import cache: a GGUF file's weights, once imported, kept as a `.lutra` file in the
//! user's cache directory, so the next load of the same file maps them in place instead of
//! converting every matrix again (a 1 GB Q4_K_M file: seconds of conversion against a
//! fraction of one to map and check).
//!
//! An entry is named after the source file and keyed by what decides its contents: the
//! source's size, modification time and header (metadata and tensor table), the kernel tier
//! the weights were imported for (its code order and which types become int8), the
//! `.lutra` format version, and the program's own size and build time (another build may
//! import differently). Entries are written beside their final name and renamed into
//! place, so a reader never sees a partial one; an entry that fails its checks is imported
//! again and replaced. One entry is kept per source file name and tier: writing a new one
//! removes older ones of the same name.

use std::io::Write;
use std::path::{Path, PathBuf};

use lutra_core::formats::gguf::Gguf;
use lutra_core::formats::pack::{self, Writer};
use lutra_core::Isa;

/// The environment variable that moves the cache (a directory) or turns it off (`off`).
pub const ENV: &str = "LUTRA_IMPORT_CACHE";

/// Where the cache lives unless told otherwise: `$LUTRA_IMPORT_CACHE`, else
/// `$XDG_CACHE_HOME/lutra/imports`, else `~/.cache/lutra/imports`; `None` when
/// `$LUTRA_IMPORT_CACHE` is `off` (or `0`) or no home directory is known.
pub fn default_dir() -> Option<PathBuf> {
    match std::env::var_os(ENV) {
        Some(v) if v == "off" || v == "0" => return None,
        Some(v) if !v.is_empty() => return Some(PathBuf::from(v)),
        _ => {}
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".cache"),
    };
    Some(base.join("lutra").join("imports"))
}

/// One source file's entry in a cache directory.
pub(crate) struct Entry {
    dir: PathBuf,
    /// `STEM.TIER.`: every entry of this source name and tier starts with it.
    prefix: String,
    path: PathBuf,
}

impl Entry {
    /// The entry for GGUF file `source` (parsed as `gguf`) imported for this machine's
    /// kernel tier; `None` when the file's metadata cannot be read.
    pub(crate) fn for_file(dir: &Path, source: &Path, gguf: &Gguf<'_>) -> Option<Entry> {
        let meta = std::fs::metadata(source).ok()?;
        let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        let header = gguf.bytes().get(..gguf.data_start())?;
        let tier = Isa::best().name();
        let mut key = Vec::with_capacity(64);
        key.extend_from_slice(&meta.len().to_le_bytes());
        key.extend_from_slice(&mtime.as_secs().to_le_bytes());
        key.extend_from_slice(&mtime.subsec_nanos().to_le_bytes());
        key.extend_from_slice(&pack::checksum(header).to_le_bytes());
        key.extend_from_slice(&pack::VERSION.to_le_bytes());
        key.extend_from_slice(tier.as_bytes());
        // the program itself: a rebuilt one may import differently (its own entries, not
        // another build's)
        let program = std::env::current_exe().and_then(std::fs::metadata).ok()?;
        let built = program.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        key.extend_from_slice(&program.len().to_le_bytes());
        key.extend_from_slice(&built.as_nanos().to_le_bytes());
        let stem = source.file_stem().map_or("model".into(), |s| s.to_string_lossy().replace(|c: char| c == '.' || c.is_control(), "_"));
        let prefix = format!("{stem}.{tier}.");
        let path = dir.join(format!("{prefix}{:016x}.lutra", pack::checksum(&key)));
        Some(Entry { dir: dir.to_path_buf(), prefix, path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the entry exists (it may still fail its checks when loaded).
    pub(crate) fn exists(&self) -> bool {
        self.path.is_file()
    }

    /// Writes `model` (imported from GGUF file bytes `origin`) as this entry, replacing
    /// older entries of the same source name and tier; returns the bytes written.
    pub(crate) fn save(&self, model: &lutra_core::engine::Model, origin: &[u8]) -> Result<u64, String> {
        let mut writer = Writer::for_this_machine();
        model.write_packed(origin, &mut writer).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        // a name of its own per process: two loads of one file may write at once
        let partial = self.path.with_extension(format!("lutra.{}.partial", std::process::id()));
        let written = (|| {
            let file = std::fs::File::create(&partial)?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let n = writer.finish(|piece| out.write_all(piece))?;
            out.flush()?;
            std::fs::rename(&partial, &self.path)?;
            Ok::<_, std::io::Error>(n)
        })();
        let written = written.map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            format!("{}: {e}", self.path.display())
        })?;
        self.remove_older();
        Ok(written)
    }

    /// Removes this source's other entries for this tier (an older version of the file).
    fn remove_older(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let stale = name.starts_with(&self.prefix) && name.ends_with(".lutra") && e.path() != self.path;
            if stale {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Removes the entry (one that failed its checks).
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
