//! `lutra inspect`.

use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// GGUF model file
    file: std::path::PathBuf,
    /// One JSON object instead of a table
    #[arg(long)]
    json: bool,
    /// Also which kernel each tensor type's matrices run on here (table lookups or int8
    /// dot products; the choice depends on the kernel tier, which LUTRA_MAX_ISA caps)
    #[arg(long)]
    kernels: bool,
}

pub fn inspect(a: InspectArgs) -> Result<(), String> {
    let report = lutra::inspect::inspect(&a.file).map_err(|e| e.to_string())?;
    match (a.json, a.kernels) {
        (true, false) => println!("{}", report.json()),
        (true, true) => println!("{}", report.json_with_kernels()),
        (false, kernels) => {
            print!("{}", report.text());
            if kernels {
                print!("{}", report.kernels_text());
            }
        }
    }
    Ok(())
}
