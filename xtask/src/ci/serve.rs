//! Step `serve`: `lutra serve` over real sockets (release), then driven by OpenAI's own
//! Python client (`openai` from PyPI, pinned): completions, streaming, refusals and 8
//! concurrent clients on stories15M; chat, a two-turn conversation from the slot's cache
//! and refusals on Qwen2.5-Coder-0.5B-Instruct, and JSON it constrains (`response_format`)
//! validated by the `jsonschema` package.

use std::process::Command;

use super::Ci;
use crate::models::{models_venv, QWEN_CODER_FILE};
use crate::process::{cargo, expect_contains, run, run_capture};
use crate::Result;

/// The client the checks run under (scripts/openai_client_check.py), and the validator of
/// the JSON it gets back.
const CLIENT_PYPI: &[&str] = &["openai==3.63.0", "jsonschema==4.26.0"];

pub(super) fn serve_tests(ci: &mut Ci) -> Result {
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra-cli", "--test", "serve"]))?;
    ci.count("host lutra serve over sockets (release)", &out, false)?;
    expect_contains(&out, "a_client_that_disconnects_mid_stream_frees_its_slot ... ok", "lutra serve: a client that goes away")?;
    expect_contains(&out, "a_full_queue_answers_each_of_1000_requests_with_503_and_retry_after ... ok", "lutra serve: a full queue")?;

    let models = ci.root.join("models");
    let venv = models_venv(&models)?;
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet"]).args(CLIENT_PYPI))?;
    let lutra = ci.target_dir.join("release/lutra");
    let script = ci.root.join("scripts/openai_client_check.py");
    let stories = models.join("stories15M/stories15M-q8_0.gguf");
    let qwen = models.join(QWEN_CODER_FILE);
    let runs: [(&std::path::Path, &[&str]); 2] =
        [(&stories, &["--completions", "--ctx", "128", "--load", "8x25", "--parallel", "4", "--max-tokens", "32"]), (&qwen, &["--chat"])];
    for (model, args) in runs {
        let out = run_capture(Command::new(venv.join("bin/python")).arg(&script).arg(&lutra).arg(model).args(args))?;
        let checks = out.lines().filter(|l| l.starts_with("ok: ")).count();
        expect_contains(&out, "ok: the server logged no panic", "the openai client checks")?;
        ci.counts.push((format!("openai client against lutra serve on {}", model.file_name().unwrap().to_string_lossy()), checks));
    }
    Ok(())
}
