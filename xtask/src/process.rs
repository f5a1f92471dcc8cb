//! Running commands: echoed (`$ ...`) before they run, failing with the command line.

use std::env;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::Result;

pub(crate) fn expect_contains(out: &str, needle: &str, what: &str) -> Result {
    if out.contains(needle) {
        Ok(())
    } else {
        Err(format!("{what}: output lacks `{needle}`"))
    }
}

pub(crate) fn on_path(tool: &str) -> bool {
    env::var_os("PATH").is_some_and(|p| env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

pub(crate) fn cargo(root: &Path) -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root);
    c
}

pub(crate) fn show(c: &Command) -> String {
    let mut s = String::new();
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            s += &format!("{}={:?} ", k.to_string_lossy(), v.to_string_lossy());
        }
    }
    let program = c.get_program().to_string_lossy();
    s += program.rsplit('/').next().unwrap_or(&program);
    for a in c.get_args() {
        s += " ";
        s += &a.to_string_lossy();
    }
    s
}

/// Stdout of a command that succeeded, trimmed; None when it failed or is missing.
pub(crate) fn quiet(c: &mut Command) -> Option<String> {
    let out = c.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub(crate) fn run(c: &mut Command) -> Result {
    println!("$ {}", show(c));
    let status = c.stdin(Stdio::null()).status().map_err(|e| format!("`{}`: {e}", show(c)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` exited with {status}", show(c)))
    }
}

/// Run with stdout and stderr passed through live and also collected (for test counts).
pub(crate) fn run_capture(c: &mut Command) -> Result<String> {
    println!("$ {}", show(c));
    let mut child =
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("`{}`: {e}", show(c)))?;
    let all = Arc::new(Mutex::new(Vec::new()));
    fn tee(mut from: impl Read + Send + 'static, mut to: impl Write + Send + 'static, all: Arc<Mutex<Vec<u8>>>) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                all.lock().expect("tee lock").extend_from_slice(&buf[..n]);
            }
        })
    }
    let t_out = tee(child.stdout.take().expect("piped"), std::io::stdout(), all.clone());
    let t_err = tee(child.stderr.take().expect("piped"), std::io::stderr(), all.clone());
    let status = child.wait().map_err(|e| format!("`{}`: {e}", show(c)))?;
    let _ = (t_out.join(), t_err.join());
    let out = String::from_utf8_lossy(&all.lock().expect("tee lock")).into_owned();
    if status.success() {
        Ok(out)
    } else {
        Err(format!("`{}` exited with {status}", show(c)))
    }
}
