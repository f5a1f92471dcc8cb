//! `lutra inspect FILE`: what a GGUF model file holds — format version, architecture,
//! hyperparameters (every `{arch}.*` key), vocabulary size, and per tensor type the
//! number of tensors and their bytes. The file is memory-mapped and read by
//! `lutra_core::formats::gguf`, so only the header pages are touched.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use lutra_core::formats::gguf::{Array, GgmlType, Gguf, GgufError, Value};
use lutra_core::formats::import;
use memmap2::Mmap;

/// Why a model file could not be inspected.
#[derive(Debug)]
pub enum InspectError {
    /// The file could not be opened, sized or mapped.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file has no bytes.
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The bytes are not a well-formed GGUF file.
    Gguf {
        /// The file.
        path: PathBuf,
        /// What the GGUF parser rejected.
        source: GgufError,
    },
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            InspectError::Empty { path } => write!(f, "{}: empty file, not a GGUF model", path.display()),
            InspectError::Gguf { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for InspectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InspectError::Io { source, .. } => Some(source),
            InspectError::Gguf { source, .. } => Some(source),
            InspectError::Empty { .. } => None,
        }
    }
}

/// Map a whole file read-only. An empty file is refused (it cannot be mapped, and no
/// model file is empty).
pub fn map_file(path: &Path) -> Result<Mmap, InspectError> {
    let io_err = |source| InspectError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    if len == 0 {
        return Err(InspectError::Empty { path: path.to_path_buf() });
    }
    // Another process truncating or rewriting the file while it is mapped would change
    // the bytes under us (or fault on access); like every mmap-based model loader we
    // accept that the user does not modify a model file while lutra reads it.
    // SAFETY: the map is read-only and only read through `&[u8]`.
    unsafe { Mmap::map(&file) }.map_err(io_err)
}

/// Tensors of one ggml type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeStats {
    /// The tensor data type.
    pub ggml_type: GgmlType,
    /// Number of tensors of this type.
    pub tensors: u64,
    /// Bytes of tensor data; `None` for a type this build does not know.
    pub bytes: Option<u64>,
    /// Elements (weights) of all tensors of this type.
    pub elements: u64,
    /// Bytes these tensors take once imported on this tier (2-D matrices in their lookup or
    /// int8 form, 1-D tensors as they are); `None` if the import refuses the type.
    pub imported_bytes: Option<u64>,
}

impl TypeStats {
    /// Bits per weight in the file.
    pub fn file_bits_per_weight(&self) -> Option<f64> {
        Some(self.bytes? as f64 * 8.0 / self.elements.max(1) as f64)
    }

    /// Bits per weight once imported on this tier.
    pub fn imported_bits_per_weight(&self) -> Option<f64> {
        Some(self.imported_bytes? as f64 * 8.0 / self.elements.max(1) as f64)
    }
}

/// One metadata entry shown in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Full metadata key, e.g. `llama.block_count`.
    pub key: String,
    /// As text (strings quoted, long arrays as `[type; len]`).
    pub text: String,
    /// As a JSON value.
    pub json: String,
}

/// What `lutra inspect` reports about a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The file's path, as given.
    pub path: String,
    /// File size in bytes.
    pub file_bytes: u64,
    /// GGUF format version.
    pub version: u32,
    /// `general.architecture`, e.g. `llama`.
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// `general.file_type` (llama.cpp's `llama_ftype`).
    pub file_type: Option<u32>,
    /// Tensor data alignment in bytes (`general.alignment`, default 32).
    pub alignment: u64,
    /// Byte offset in the file where tensor data starts.
    pub data_offset: u64,
    /// Number of metadata key/value entries.
    pub metadata_count: u64,
    /// Length of `tokenizer.ggml.tokens`, else `{arch}.vocab_size`.
    pub vocab_size: Option<u64>,
    /// `tokenizer.ggml.model`, e.g. `llama` or `gpt2`.
    pub tokenizer_model: Option<String>,
    /// The chat format of `tokenizer.chat_template` as llama.cpp recognizes it (its
    /// builtin template name: `chatml`, `llama3`...); `Some("unrecognized")` for a template
    /// it does not recognize, `None` without one.
    pub chat_template: Option<String>,
    /// Every `{arch}.*` metadata entry, in file order.
    pub hyperparameters: Vec<Entry>,
    /// Number of tensors in the file.
    pub tensor_count: u64,
    /// Per type, in ggml type id order.
    pub types: Vec<TypeStats>,
    /// Bytes of all tensors of known types.
    pub total_bytes: u64,
    /// Elements of all tensors.
    pub parameters: u64,
}

/// Map and read `path`.
pub fn inspect(path: &Path) -> Result<Report, InspectError> {
    let map = map_file(path)?;
    inspect_bytes(path, &map)
}

/// Read the GGUF file `bytes` (named `path` in messages).
pub fn inspect_bytes(path: &Path, bytes: &[u8]) -> Result<Report, InspectError> {
    let g = Gguf::parse(bytes).map_err(|source| InspectError::Gguf { path: path.to_path_buf(), source })?;
    let architecture = g.get_str("general.architecture").map(str::to_owned);
    let prefix = architecture.as_deref().map(|a| format!("{a}."));
    let hyperparameters = match &prefix {
        Some(p) => g
            .metadata()
            .filter(|(k, _)| k.starts_with(p.as_str()))
            .map(|(k, v)| Entry { key: k.to_owned(), text: value_text(&v), json: value_json(&v) })
            .collect(),
        None => Vec::new(),
    };
    let vocab_size = g
        .get_array("tokenizer.ggml.tokens")
        .map(|a| a.len())
        .or_else(|| prefix.as_ref().and_then(|p| g.get_u64(&format!("{p}vocab_size"))));

    let mut types: Vec<TypeStats> = Vec::new();
    let mut parameters = 0u64;
    for t in g.tensors() {
        let elements = t.n_elements().unwrap_or(0);
        parameters = parameters.saturating_add(elements);
        let bytes = t.byte_size().ok();
        let imported_bytes = match import::imported_bytes(&t) {
            Some(b) => Some(b as u64),
            // kept as it is: an f32 vector (norms, biases); the import refuses any other
            None => bytes.filter(|_| t.n_dims < 2 && t.ggml_type == GgmlType::F32),
        };
        match types.iter_mut().find(|s| s.ggml_type == t.ggml_type) {
            Some(s) => {
                s.tensors += 1;
                s.bytes = s.bytes.zip(bytes).map(|(a, b)| a.saturating_add(b));
                s.elements = s.elements.saturating_add(elements);
                s.imported_bytes = s.imported_bytes.zip(imported_bytes).map(|(a, b)| a.saturating_add(b));
            }
            None => types.push(TypeStats { ggml_type: t.ggml_type, tensors: 1, bytes, elements, imported_bytes }),
        }
    }
    types.sort_by_key(|s| s.ggml_type.id());
    let total_bytes = types.iter().filter_map(|s| s.bytes).fold(0u64, u64::saturating_add);

    Ok(Report {
        path: path.display().to_string(),
        file_bytes: bytes.len() as u64,
        version: g.version(),
        name: g.get_str("general.name").map(str::to_owned),
        file_type: g.get_u32("general.file_type"),
        architecture,
        alignment: g.alignment(),
        data_offset: g.data_start() as u64,
        metadata_count: g.metadata_count(),
        vocab_size,
        tokenizer_model: g.get_str("tokenizer.ggml.model").map(str::to_owned),
        chat_template: g
            .get_str("tokenizer.chat_template")
            .map(|t| lutra_core::chat::ChatTemplate::detect(t).and_then(|t| t.name()).unwrap_or("unrecognized").to_owned()),
        hyperparameters,
        tensor_count: g.tensor_count(),
        types,
        total_bytes,
        parameters,
    })
}

/// llama.cpp's name for a `general.file_type` (`enum llama_ftype` in llama.h).
pub fn file_type_name(ftype: u32) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

/// Arrays of numbers up to this length are listed in full; longer ones and arrays of
/// strings or arrays are summarized as `[type; len]`.
const LIST_MAX: u64 = 64;

fn listable<'a>(v: &Value<'a>) -> Option<Array<'a>> {
    v.as_array().filter(|a| a.len() <= LIST_MAX && a.elem_type().fixed_size().is_some())
}

fn value_text(v: &Value<'_>) -> String {
    match listable(v) {
        Some(a) => {
            let items: Vec<String> = a.iter().map(|x| x.to_string()).collect();
            format!("[{}]", items.join(", "))
        }
        None => v.to_string(),
    }
}

fn value_json(v: &Value<'_>) -> String {
    match *v {
        // f32 printed as f32 (shortest round-trip digits), not widened to f64.
        Value::F32(x) if x.is_finite() => x.to_string(),
        Value::F32(_) => "null".into(),
        Value::F64(x) => json_float(x),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => json_string(&String::from_utf8_lossy(s)),
        Value::Array(a) => match listable(v) {
            Some(a) => format!("[{}]", a.iter().map(|x| value_json(&x)).collect::<Vec<_>>().join(",")),
            None => format!("{{\"type\":{},\"len\":{}}}", json_string(a.elem_type().name()), a.len()),
        },
        _ => v.to_string(), // integers
    }
}

fn json_float(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt_str(s: &Option<String>) -> String {
    s.as_deref().map_or_else(|| "null".into(), json_string)
}

fn json_opt<T: fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl Report {
    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let na = "-";
        let _ = writeln!(s, "file            {} ({} bytes, {:.1} MiB)", self.path, self.file_bytes, mib(self.file_bytes));
        let _ = writeln!(
            s,
            "format          GGUF v{}, alignment {}, {} metadata entries, tensor data from byte {}",
            self.version, self.alignment, self.metadata_count, self.data_offset
        );
        let _ = writeln!(s, "architecture    {}", self.architecture.as_deref().unwrap_or(na));
        let _ = writeln!(s, "name            {}", self.name.as_deref().unwrap_or(na));
        if let Some(ft) = self.file_type {
            let _ = writeln!(s, "file type       {} ({ft})", file_type_name(ft).unwrap_or("unknown"));
        }
        let _ = write!(s, "vocab size      {}", json_opt(self.vocab_size).replace("null", na));
        if let Some(m) = &self.tokenizer_model {
            let _ = write!(s, " (tokenizer model {m:?})");
        }
        s.push('\n');
        if let Some(t) = &self.chat_template {
            let _ = writeln!(s, "chat template   {t} (from tokenizer.chat_template)");
        }
        if !self.hyperparameters.is_empty() {
            let _ = writeln!(s, "hyperparameters");
            let width = self.hyperparameters.iter().map(|e| e.key.len()).max().unwrap_or(0);
            for e in &self.hyperparameters {
                let _ = writeln!(s, "  {:width$}  {}", e.key, e.text);
            }
        }
        let _ = writeln!(s, "tensors         {} ({} parameters)", self.tensor_count, self.parameters);
        let _ = writeln!(s, "  {:<10} {:>8} {:>14} {:>10} {:>6} {:>7}", "type", "tensors", "bytes", "MiB", "%", "bits/w");
        for t in &self.types {
            let name = t.ggml_type.to_string();
            match t.bytes {
                Some(b) => {
                    let pct = if self.total_bytes > 0 { 100.0 * b as f64 / self.total_bytes as f64 } else { 0.0 };
                    let bits = t.file_bits_per_weight().unwrap_or(0.0);
                    let _ = writeln!(s, "  {:<10} {:>8} {:>14} {:>10.1} {:>6.1} {:>7.3}", name, t.tensors, b, mib(b), pct, bits);
                }
                None => {
                    let _ = writeln!(s, "  {:<10} {:>8} {:>14} {:>10} {:>6}", name, t.tensors, "?", "?", "?");
                }
            }
        }
        let _ = writeln!(
            s,
            "  {:<10} {:>8} {:>14} {:>10.1} {:>6.1} {:>7.3}",
            "total",
            self.tensor_count,
            self.total_bytes,
            mib(self.total_bytes),
            100.0,
            self.total_bytes as f64 * 8.0 / self.parameters.max(1) as f64
        );
        if self.types.iter().any(|t| t.bytes.is_none()) {
            let _ = writeln!(s, "  (? = ggml type unknown to this build; its bytes are not counted)");
        }
        s
    }

    /// Which kernel each tensor type's matrices run on with this machine's best kernel
    /// tier (`lutra_core::formats::import::matrix_kernel`).
    pub fn kernels_text(&self) -> String {
        let mut s = format!("kernels         {} (the best tier here; LUTRA_MAX_ISA caps it)\n", lutra_core::Isa::best().name());
        let _ = writeln!(s, "  {:<10} {:>7} {:>9} {:>7}  kernel", "type", "bits/w", "imported", "ratio");
        let (mut file, mut imported) = (0u64, 0u64);
        for t in &self.types {
            let kernel = import::matrix_kernel(t.ggml_type).unwrap_or("refused");
            let bits = |b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{b:.3}"));
            let ratio = t.bytes.zip(t.imported_bytes).map_or("-".to_owned(), |(f, i)| format!("{:.3}", i as f64 / f.max(1) as f64));
            let (b, i) = (bits(t.file_bits_per_weight()), bits(t.imported_bits_per_weight()));
            let _ = writeln!(s, "  {:<10} {b:>7} {i:>9} {ratio:>7}  {kernel}", t.ggml_type.to_string());
            file += t.bytes.unwrap_or(0);
            imported += t.imported_bytes.or(t.bytes).unwrap_or(0);
        }
        let _ = writeln!(
            s,
            "  imported weights {imported} bytes ({:.1} MiB), {:.3}× the file's tensor data",
            mib(imported),
            imported as f64 / file.max(1) as f64
        );
        let _ = writeln!(s, "  (1-D tensors, norms and biases, stay f32)");
        s
    }

    /// `json` with a `"kernels"` object: the tier, and per type its matrices' kernel.
    pub fn json_with_kernels(&self) -> String {
        let types: Vec<String> = self
            .types
            .iter()
            .map(|t| {
                let kernel = import::matrix_kernel(t.ggml_type);
                format!("{}:{}", json_string(&t.ggml_type.to_string()), kernel.map_or("null".into(), json_string))
            })
            .collect();
        let imported: Vec<String> = self
            .types
            .iter()
            .map(|t| {
                format!(
                    "{}:{{\"bytes\":{},\"file_bits_per_weight\":{},\"bits_per_weight\":{}}}",
                    json_string(&t.ggml_type.to_string()),
                    json_opt(t.imported_bytes),
                    json_opt(t.file_bits_per_weight().map(json_float)),
                    json_opt(t.imported_bits_per_weight().map(json_float))
                )
            })
            .collect();
        let json = self.json();
        let kernels = format!(
            ",\"kernels\":{{\"tier\":{},\"types\":{{{}}},\"imported\":{{{}}}}}}}",
            json_string(lutra_core::Isa::best().name()),
            types.join(","),
            imported.join(",")
        );
        format!("{}{kernels}", &json[..json.len() - 1])
    }

    /// The report as one JSON object (one line).
    pub fn json(&self) -> String {
        let hyper: Vec<String> = self.hyperparameters.iter().map(|e| format!("{}:{}", json_string(&e.key), e.json)).collect();
        let types: Vec<String> = self
            .types
            .iter()
            .map(|t| {
                format!(
                    "{{\"type\":{},\"id\":{},\"tensors\":{},\"bytes\":{}}}",
                    json_string(&t.ggml_type.to_string()),
                    t.ggml_type.id(),
                    t.tensors,
                    json_opt(t.bytes)
                )
            })
            .collect();
        format!(
            concat!(
                "{{\"file\":{},\"file_bytes\":{},\"version\":{},\"architecture\":{},\"name\":{},\"file_type\":{},",
                "\"alignment\":{},\"data_offset\":{},\"metadata_count\":{},\"vocab_size\":{},\"tokenizer_model\":{},\"chat_template\":{},",
                "\"hyperparameters\":{{{}}},\"tensor_count\":{},\"types\":[{}],\"total_bytes\":{},\"parameters\":{}}}"
            ),
            json_string(&self.path),
            self.file_bytes,
            self.version,
            json_opt_str(&self.architecture),
            json_opt_str(&self.name),
            json_opt(self.file_type),
            self.alignment,
            self.data_offset,
            self.metadata_count,
            json_opt(self.vocab_size),
            json_opt_str(&self.tokenizer_model),
            json_opt_str(&self.chat_template),
            hyper.join(","),
            self.tensor_count,
            types.join(","),
            self.total_bytes,
            self.parameters,
        )
    }
}
