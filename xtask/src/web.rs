//! The browser page (www/): `cargo xtask web` builds and serves it, `cargo xtask test-web`
//! (and the `web` step of `test`) runs its tests in headless Chromium.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::models::{fetch_gemma, fetch_qwen_coder, fetch_stories, write_one_bit_qwen3, GEMMA_FILE, QWEN_CODER_FILE};
use crate::process::{cargo, expect_contains, run, run_capture};
use crate::toolchain::{nightly_ready, NIGHTLY, THREADS_RUSTFLAGS, WASM32};
use crate::{workspace_root, Result};

/// `cargo xtask web [--model gemma|qwen]... [--gemma] [--port PORT]`: builds the page and
/// serves `www/` on 127.0.0.1 with COOP/COEP headers (crossOriginIsolated, threads-ready);
/// stories15M always, Gemma 3 270M and Qwen2.5-Coder-0.5B-Instruct (a chat model) when asked.
pub(crate) fn web(args: &[String]) -> Result {
    let root = workspace_root();
    let target_dir = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let value = |flag: &str| args.iter().position(|a| a == flag).map(|i| args.get(i + 1).ok_or(format!("{flag} needs a value")));
    let mut models = Vec::new();
    for (i, a) in args.iter().enumerate() {
        match (a.as_str(), args.get(i + 1).map(String::as_str)) {
            ("--gemma", _) | ("--model", Some("gemma")) => models.push(WebModel::Gemma),
            ("--model", Some("qwen")) => models.push(WebModel::Qwen),
            ("--model", other) => return Err(format!("--model takes gemma or qwen, not {other:?}")),
            _ => {}
        }
    }
    let port = value("--port").transpose()?.cloned().unwrap_or_else(|| "8080".into());
    build_web(&root, &target_dir, &models)?;
    println!("open http://127.0.0.1:{port}/ (Ctrl-C stops the server)");
    run(Command::new("node").args(["serve.mjs", ".", &port, "--isolated"]).current_dir(root.join("www")))
}

/// The page's files: www/pkg (the wasm, release, `wasm-bindgen --target web`, npm
/// binaryen's `wasm-opt -O3`) and www/models (stories15M and `models`), linked from
/// models/ (fetched when missing).
fn build_web(root: &Path, target_dir: &Path, models: &[WebModel]) -> Result {
    let www = root.join("www");
    if !www.join("node_modules/.bin/wasm-opt").exists() || !www.join("node_modules/playwright-core").exists() {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&www))?;
    }
    // two builds: simd128 for every browser, and relaxed SIMD where the worker finds it
    // (its own target dir: the flags differ, and .cargo/config.toml's stay for the first)
    let relaxed_dir = target_dir.join("wasm-relaxed");
    run(cargo(root).args(["build", "-p", "lutra-wasm", "--release", "--target", WASM32]))?;
    run(cargo(root)
        .args(["build", "-p", "lutra-wasm", "--release", "--target", WASM32, "--target-dir"])
        .arg(&relaxed_dir)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", "-C target-feature=+simd128,+relaxed-simd"))?;
    // and a threaded one (relaxed SIMD + atomics, shared memory), for `?threads=N`
    let threads_dir = target_dir.join("wasm-threads");
    nightly_ready()?;
    run(Command::new("rustup")
        .args(["run", NIGHTLY, "cargo", "build", "-p", "lutra-wasm", "--release", "--target", WASM32])
        .args(["-Z", "build-std=panic_abort,std", "--target-dir"])
        .arg(&threads_dir)
        .current_dir(root)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", THREADS_RUSTFLAGS))?;
    for (build, pkg) in [(target_dir, "pkg"), (relaxed_dir.as_path(), "pkg-relaxed"), (threads_dir.as_path(), "pkg-threads")] {
        let (wasm, pkg) = (build.join(WASM32).join("release/lutra_wasm.wasm"), www.join(pkg));
        run(Command::new("wasm-bindgen").args(["--target", "web", "--no-typescript", "--out-dir"]).arg(&pkg).arg(&wasm))?;
        let bg = pkg.join("lutra_wasm_bg.wasm");
        run(Command::new(www.join("node_modules/.bin/wasm-opt")).arg("-O3").arg(&bg).arg("-o").arg(&bg))?;
        let size = fs::metadata(&bg).map_err(|e| format!("{}: {e}", bg.display()))?.len();
        println!("{}: {size} bytes", bg.display());
    }

    fetch_stories(root)?;
    let mut files = vec!["stories15M/model.bin", "stories15M/tokenizer.bin"];
    for model in models {
        files.push(match model {
            WebModel::Gemma => fetch_gemma(root).map(|_| GEMMA_FILE)?,
            WebModel::Qwen => fetch_qwen_coder(root).map(|_| QWEN_CODER_FILE)?,
        });
    }
    for file in files {
        let (from, to) = (root.join("models").join(file), www.join("models").join(file));
        if to.exists() {
            continue;
        }
        fs::create_dir_all(to.parent().expect("a folder")).map_err(|e| format!("{}: {e}", to.display()))?;
        // a hard link costs no space; a copy where links cannot be made
        fs::hard_link(&from, &to)
            .or_else(|_| fs::copy(&from, &to).map(drop))
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    }
    Ok(())
}

/// The models the page's menu offers besides stories15M.
#[derive(Clone, Copy)]
enum WebModel {
    Gemma,
    Qwen,
}

/// `cargo xtask test-web [--gemma] [--qwen]`: the page's tests in headless Chromium, against
/// the native CLI's greedy text (the release `lutra` built here); with Gemma 3 and the
/// Qwen2.5-Coder-0.5B-Instruct chat served from the same origin when asked.
pub(crate) fn test_web(root: &Path, target_dir: &Path, gemma: bool, qwen: bool) -> Result {
    if !Path::new("/usr/bin/chromium").exists() {
        return Err("no /usr/bin/chromium: `cargo xtask test install` (or apt-get install chromium) first".into());
    }
    let models: Vec<WebModel> =
        [(gemma, WebModel::Gemma), (qwen, WebModel::Qwen)].into_iter().filter(|(on, _)| *on).map(|(_, m)| m).collect();
    build_web(root, target_dir, &models)?;
    run(cargo(root).args(["build", "--release", "-p", "lutra-cli"]))?;
    // the page loads a 1-bit qwen3 file from disk
    let one_bit = write_one_bit_qwen3(root, &target_dir.join("web"))?;
    let mut c = Command::new("node");
    c.args(["--test", "test/"]).current_dir(root.join("www")).env("LUTRA_BIN", target_dir.join("release/lutra"));
    c.env("LUTRA_WEB_Q1_0", &one_bit);
    if gemma {
        c.env("LUTRA_WEB_GEMMA", "1");
    }
    if qwen {
        c.env("LUTRA_WEB_QWEN", "1");
    }
    let out = run_capture(&mut c)?;
    expect_contains(&out, "# fail 0", "browser tests")?;
    println!("--- browser (headless Chromium): screenshots in target/web/");
    Ok(())
}
