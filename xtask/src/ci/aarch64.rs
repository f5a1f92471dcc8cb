//! Step `aarch64`: lutra-core and lutra-embedded under qemu-aarch64 (NEON), and lutra-core's
//! int8 kernels again built with +dotprod.

use super::{cross_profile, Ci};
use crate::process::{cargo, run_capture};
use crate::toolchain::AARCH64;
use crate::Result;

pub(super) fn aarch64_tests(ci: &mut Ci) -> Result {
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "-p", "lutra-embedded", "--target", AARCH64]).args(cross_profile());
    c.env("LUTRA_EXPECT_ISA", "neon");
    let out = run_capture(&mut c)?;
    ci.count("aarch64 qemu-user (lutra-core + lutra-embedded, neon)", &out, true)?;
    ci.ran("neon", "qemu-aarch64");
    // a build for cores with the dot-product extension (Pi 5, Apple): the int8 kernels'
    // `sdot` form against the scalar one (qemu's default CPU has the extension); its own
    // target dir, as the flags differ
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "--target", AARCH64, "--test", "int8", "--test", "isa", "--target-dir"])
        .arg(ci.target_dir.join("aarch64-dotprod"))
        .args(cross_profile());
    c.env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS", "-C target-feature=+dotprod");
    c.envs([("LUTRA_EXPECT_ISA", "neon"), ("LUTRA_EXPECT_DOTPROD", "1")]);
    let out = run_capture(&mut c)?;
    ci.count("aarch64 qemu-user, +dotprod (lutra-core int8 and isa tests)", &out, true)?;
    ci.ran("neon+dotprod", "qemu-aarch64");
    Ok(())
}
