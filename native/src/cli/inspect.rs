//! `lutra inspect`.

use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// GGUF model file
    file: std::path::PathBuf,
    /// One JSON object instead of a table
    #[arg(long)]
    json: bool,
}

pub fn inspect(a: InspectArgs) -> Result<(), String> {
    let report = lutra::inspect::inspect(&a.file).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(())
}
