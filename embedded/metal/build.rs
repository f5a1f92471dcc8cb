//! The image's linker script (bare metal only), and the packed model it embeds:
//! `LUTRA_METAL_MODEL=FILE.lutra` is copied to OUT_DIR (empty when unset: the image
//! then says how to build it), so `include_bytes!` needs no path of the caller's.

use std::path::PathBuf;
use std::{env, fs};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=LUTRA_METAL_MODEL");
    let model = out.join("model.lutra");
    match env::var_os("LUTRA_METAL_MODEL") {
        Some(path) => {
            println!("cargo:rerun-if-changed={}", PathBuf::from(&path).display());
            let _ = fs::remove_file(&model);
            if fs::hard_link(&path, &model).is_err() {
                fs::copy(&path, &model).unwrap_or_else(|e| panic!("LUTRA_METAL_MODEL={}: {e}", PathBuf::from(&path).display()));
            }
        }
        None => fs::write(&model, b"").unwrap(),
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
        println!("cargo:rerun-if-changed=link.ld");
        println!("cargo:rustc-link-arg-bins=-T{}", dir.join("link.ld").display());
        if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
}
