//! `lutra chat` driven through a pipe: each line a turn, every turn appended to the same
//! session (the second turn computes only its own tokens), EOF ends cleanly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn model(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models").join(name);
    assert!(p.exists(), "{} missing: run `cargo xtask models all` first", p.display());
    p
}

fn chat(model: &Path, stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lutra"))
        .env("LUTRA_IMPORT_CACHE", "off")
        .args(["chat", "-m", model.to_str().unwrap(), "--temp", "0", "-n", "8", "-t", "1", "--ctx", "512"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lutra chat");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// `[N new prompt tokens, M generated in S s; P of C positions used]` → (N, P).
fn turn_stats(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix('[')?;
            let new: usize = l.split(' ').next()?.parse().ok()?;
            let used: usize = l.split("; ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((new, used))
        })
        .collect()
}

#[test]
#[cfg_attr(debug_assertions, ignore = "Gemma unoptimized takes minutes: `cargo xtask test host` runs it with --release")]
fn two_turns_share_one_session() {
    let out = chat(&model("gemma-3-270m-q4_k_m.gguf"), "Name a river otter.\n\nAnd a sea otter?\n");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let turns = turn_stats(&stderr);
    assert_eq!(turns.len(), 2, "two answers (the blank line is skipped): {stderr}");
    let ((new1, used1), (new2, used2)) = (turns[0], turns[1]);
    // the second turn computed its own tokens only, after everything the first left
    assert!(new1 <= used1 && new2 < used1 && used1 + new2 <= used2, "{turns:?}");
    assert!(stdout.lines().count() >= 2, "{stdout:?}");
}

#[test]
fn models_without_a_chat_format_are_refused() {
    let out = chat(&model("stories15M/model.bin"), "hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("has no chat template") && !stderr.contains("panicked"), "{stderr}");
}
