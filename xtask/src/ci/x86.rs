//! Step `x86`: lutra-core's tests on emulated x86 CPUs (qemu-x86_64), one per lower tier.

use super::{cross_profile, Ci};
use crate::process::{cargo, run_capture};
use crate::Result;

const X86_64: &str = "x86_64-unknown-linux-gnu";
/// Emulated x86 CPUs for the lower dispatch tiers, and the kernel each must select.
/// (qemu's TCG has no AVX-512, so that tier is only tested natively.)
const X86_TIERS: &[(&str, &str)] = &[("Nehalem", "ssse3"), ("Haswell", "avx2")];

pub(super) fn x86_tiers(ci: &mut Ci) -> Result {
    for (cpu, isa) in X86_TIERS {
        let mut c = cargo(&ci.root);
        c.args(["test", "-p", "lutra-core", "--target", X86_64]).args(cross_profile());
        c.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", format!("qemu-x86_64 -cpu {cpu}"));
        c.env("LUTRA_EXPECT_ISA", isa);
        let out = run_capture(&mut c)?;
        ci.count(&format!("x86_64 qemu -cpu {cpu} (lutra-core, {isa})"), &out, true)?;
        ci.ran(isa, &format!("qemu -cpu {cpu}"));
    }
    Ok(())
}
