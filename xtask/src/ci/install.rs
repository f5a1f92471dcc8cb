//! Step `install`: the tools every other step needs (apt packages, rust targets, the
//! nightly toolchain with rust-src and miri, wasm-bindgen-cli, defmt-print, cargo-fuzz).

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use super::Ci;
use crate::fuzz::cargo_fuzz_ready;
use crate::process::{cargo, on_path, quiet, run};
use crate::toolchain::{nightly_ready, BARE_METAL, NIGHTLY, WASM32};
use crate::Result;

/// Must equal the `wasm-bindgen` version in Cargo.lock (pinned with `=` in Cargo.toml):
/// the CLI refuses modules built with any other version.
const WASM_BINDGEN_VERSION: &str = "0.2.130";
/// Decodes the bare-metal image's defmt frames; must read defmt 1.x's wire format.
const DEFMT_PRINT_VERSION: &str = "1.2.0";
const APT_PACKAGES: &[&str] =
    &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross", "qemu-user", "qemu-system-arm", "file", "time", "g++", "chromium"];
const RUST_TARGETS: &[&str] = &["aarch64-unknown-linux-gnu", "aarch64-unknown-linux-musl", "wasm32-unknown-unknown", BARE_METAL];

pub(super) fn install(ci: &mut Ci) -> Result {
    // system packages: cross gcc + glibc for aarch64, qemu-user, `file`; node for the wasm runner
    let mut missing: Vec<&str> = APT_PACKAGES.iter().copied().filter(|p| !dpkg_installed(p)).collect();
    if !on_path("node") {
        missing.push("nodejs");
    }
    if missing.is_empty() {
        println!("apt packages present: {}", APT_PACKAGES.join(" "));
    } else {
        println!("missing: {}", missing.join(" "));
        let root = quiet(Command::new("id").arg("-u")).as_deref() == Some("0");
        let apt = || {
            let mut c = if root { Command::new("apt-get") } else { Command::new("sudo") };
            if !root {
                c.arg("apt-get");
            }
            c.env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        run(apt().args(["update", "-q"]))?;
        let mut c = apt();
        c.args(["install", "-y", "-q", "--no-install-recommends"]);
        run(c.args(APT_PACKAGES).args(missing.iter().filter(|p| !APT_PACKAGES.contains(p))))?;
    }

    // rust components and targets
    for (tool, component) in [("clippy", "clippy"), ("fmt", "rustfmt")] {
        if quiet(cargo(&ci.root).args([tool, "--version"])).is_none() {
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    let installed: BTreeSet<String> =
        quiet(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default().lines().map(String::from).collect();
    let targets: Vec<&str> = RUST_TARGETS.iter().copied().filter(|t| !installed.contains(*t)).collect();
    if targets.is_empty() {
        println!("rust targets present: {}", RUST_TARGETS.join(" "));
    } else {
        run(Command::new("rustup").args(["target", "add"]).args(&targets))?;
    }

    // nightly for the page's threaded wasm build (std rebuilt with atomics: rust-src)
    if nightly_ready().is_ok() {
        println!("{NIGHTLY} with rust-src and {WASM32} present");
    } else {
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            NIGHTLY,
            "--profile",
            "minimal",
            "--component",
            "rust-src,clippy",
            "--target",
            WASM32,
        ]))?;
        nightly_ready()?;
    }

    // Miri (the portable code's UB check) and cargo-fuzz, both on nightly
    if quiet(Command::new("rustup").args(["run", NIGHTLY, "cargo", "miri", "--version"])).is_some() {
        println!("miri present");
    } else {
        run(Command::new("rustup").args(["component", "add", "--toolchain", NIGHTLY, "miri"]))?;
    }
    cargo_fuzz_ready(&ci.root)?;

    // wasm-bindgen: the CLI, the test runner and Cargo.lock must agree exactly
    let lock = fs::read_to_string(ci.root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    match locked_version(&lock, "wasm-bindgen") {
        Some(v) if v == WASM_BINDGEN_VERSION => println!("Cargo.lock: wasm-bindgen {v}"),
        other => return Err(format!("Cargo.lock has wasm-bindgen {other:?}, the CLI pinned here is {WASM_BINDGEN_VERSION}")),
    }
    let want = format!("wasm-bindgen {WASM_BINDGEN_VERSION}");
    let runner = format!("wasm-bindgen-test-runner {WASM_BINDGEN_VERSION}");
    let have = quiet(Command::new("wasm-bindgen").arg("--version"));
    let have_runner = quiet(Command::new("wasm-bindgen-test-runner").arg("--version"));
    if have.as_deref() == Some(&want) && have_runner.as_deref() == Some(&runner) {
        println!("{want} present");
    } else {
        println!("wasm-bindgen CLI: {have:?}, want {want:?}: installing (takes minutes)");
        // Not --locked: the CLI's own lock file names crates (webpki-roots 1.0.11) that the
        // registry reachable from CI does not have; without it cargo resolves to ones it has.
        run(cargo(&ci.root).args(["install", "wasm-bindgen-cli", "--version", WASM_BINDGEN_VERSION]))?;
        let have = quiet(Command::new("wasm-bindgen").arg("--version"));
        if have.as_deref() != Some(&want) {
            return Err(format!("after install, `wasm-bindgen --version` is {have:?} (is ~/.cargo/bin on PATH?)"));
        }
    }
    let want = format!("defmt-print {DEFMT_PRINT_VERSION}");
    if quiet(Command::new("defmt-print").arg("--version")).is_some_and(|v| v.starts_with(&want)) {
        println!("{want} present");
    } else {
        println!("{want}: installing (takes minutes)");
        run(cargo(&ci.root).args(["install", "defmt-print", "--locked", "--version", DEFMT_PRINT_VERSION]))?;
    }
    for tool in [
        "qemu-x86_64",
        "qemu-aarch64",
        "qemu-system-aarch64",
        "aarch64-linux-gnu-gcc",
        "aarch64-linux-gnu-objcopy",
        "node",
        "file",
        "defmt-print",
    ] {
        if !on_path(tool) {
            return Err(format!("`{tool}` not found on PATH"));
        }
    }
    Ok(())
}

/// `version` of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let header = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == header {
            let v = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(v.to_string());
        }
    }
    None
}

fn dpkg_installed(package: &str) -> bool {
    quiet(Command::new("dpkg-query").args(["-W", "-f", "${Status}", package])).is_some_and(|s| s == "install ok installed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_from_cargo_lock() {
        let lock = "[[package]]\nname = \"wasm-bindgen\"\nversion = \"0.2.130\"\n\n[[package]]\nname = \"wasm-bindgen-test\"\nversion = \"0.3.80\"\n";
        assert_eq!(locked_version(lock, "wasm-bindgen").as_deref(), Some("0.2.130"));
        assert_eq!(locked_version(lock, "wasm-bindgen-test").as_deref(), Some("0.3.80"));
        assert_eq!(locked_version(lock, "half"), None);
    }
}
