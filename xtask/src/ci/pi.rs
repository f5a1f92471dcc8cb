//! Step `pi` (also `cargo xtask test-pi`): lutra-pi (static aarch64 musl) under
//! qemu-aarch64, its peak RSS natively, and the bare-metal image booted on emulated
//! Raspberry Pis 3 and 4.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Ci;
use crate::models::{fetch_qwen_coder, fetch_stories, write_one_bit_qwen3, GEMMA_FILE, QWEN_CODER_FILE};
use crate::process::{cargo, expect_contains, run, run_capture, show};
use crate::toolchain::{AARCH64_MUSL, BARE_METAL};
use crate::Result;

/// `lutra-pi` on aarch64 (static musl, qemu-user): stories15M, a tiny 1-bit qwen3 file and
/// Gemma 3 packed by the host CLI, their greedy text against the host CLI's on the same files on
/// its best tier (every tier adds floats in one order); `lutra-pi chat` on the packed
/// Qwen2.5-Coder-0.5B-Instruct file, two turns against `lutra chat`'s; non-.lutra and
/// truncated files are refused.
pub(super) fn pi_tests(ci: &mut Ci) -> Result {
    fetch_stories(&ci.root)?;
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-cli"]))?;
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-embedded", "--target", AARCH64_MUSL]))?;
    let lutra = ci.target_dir.join("release/lutra");
    let pi = ci.target_dir.join(AARCH64_MUSL).join("release/lutra-pi");
    let dir = ci.target_dir.join("pi");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let packed = dir.join("stories15M-q4.lutra");
    let checkpoint = ci.root.join("models/stories15M/model.bin");
    run(Command::new(&lutra).arg("pack").arg("-m").arg(&checkpoint).args(["--bits", "4", "-o"]).arg(&packed))?;
    let (prompt, n) = ("Once upon a time", "32");
    // stdin closed at once: what a run without input sees
    let stdout = |c: &mut Command| with_input(c, "");
    // and a 1-bit qwen3 file as Bonsai ships (Q1_0 layers, Q8_0 embedding and head)
    let one_bit = dir.join("qwen3-bonsai-style-q1_0.lutra");
    run(Command::new(&lutra).arg("pack").arg("-m").arg(write_one_bit_qwen3(&ci.root, &dir)?).arg("-o").arg(&one_bit))?;
    let mut texts = vec![(packed.clone(), prompt, n), (one_bit.clone(), "Otters hold hands while they sleep", "24")];
    // and Gemma 3 (about 30 s under qemu), packed once here for the RSS runs below too
    let gemma = ci.root.join("models").join(GEMMA_FILE);
    let gemma_packed = dir.join("gemma-3-270m.lutra");
    if gemma.exists() {
        run(Command::new(&lutra).arg("pack").arg("-m").arg(&gemma).arg("-o").arg(&gemma_packed))?;
        texts.push((gemma_packed.clone(), "Otters are", "32"));
    }
    // a conversation with a real instruct model (about 60 s under qemu): two turns, each
    // answer generated with the arena sealed, the same text as the x86 CLI's `lutra chat`
    fetch_qwen_coder(&ci.root)?;
    let qwen_packed = dir.join("qwen2.5-coder-0.5b-instruct.lutra");
    run(Command::new(&lutra).arg("pack").arg("-m").arg(ci.root.join("models").join(QWEN_CODER_FILE)).arg("-o").arg(&qwen_packed))?;
    let turns = "Write a Python function that reverses a string.\nNow make it return None for None.\n";
    let (pi_chat, pi_stats) =
        with_input(Command::new("qemu-aarch64").arg(&pi).arg("chat").arg(&qwen_packed).args(["-n", "24", "--temp", "0"]), turns)?;
    let (cli_chat, _) =
        with_input(Command::new(&lutra).arg("chat").arg("-m").arg(&qwen_packed).args(["-n", "24", "--temp", "0", "-t", "1"]), turns)?;
    println!("lutra-pi chat (aarch64, qemu):\n{pi_chat}\n{}", pi_stats.trim_end());
    let answered = pi_stats.matches(", 0 allocations refused while sealed]").count();
    if pi_chat != cli_chat || answered != 2 || pi_chat.trim().is_empty() {
        return Err(format!(
            "lutra-pi chat under qemu-aarch64 on {} ({answered} of 2 turns answered with the arena sealed) wrote {pi_chat:?}\n  `lutra chat` (x86, best tier) wrote {cli_chat:?}",
            qwen_packed.display()
        ));
    }
    println!("lutra-pi chat: two turns of aarch64 NEON text = x86 `lutra chat` text on {}", qwen_packed.display());
    for (file, prompt, n) in &texts {
        let (prompt, n) = (*prompt, *n);
        let (on_pi, stats) = stdout(Command::new("qemu-aarch64").arg(&pi).arg(file).args(["-p", prompt, "-n", n, "--temp", "0"]))?;
        let (on_x86, _) =
            stdout(Command::new(&lutra).arg("run").arg("-m").arg(file).args(["-p", prompt, "-n", n, "--temp", "0", "-t", "1"]))?;
        println!("lutra-pi (aarch64, qemu): {on_pi:?}\n{}", stats.trim_end());
        if on_pi != on_x86 || on_pi.len() <= prompt.len() {
            return Err(format!(
                "lutra-pi under qemu-aarch64 on {} wrote {on_pi:?}\n  the x86 CLI (best tier) wrote {on_x86:?}",
                file.display()
            ));
        }
        println!("lutra-pi: aarch64 NEON text = x86 best-tier text on {}", file.display());
    }
    let size = fs::metadata(&pi).map_err(|e| e.to_string())?.len();
    println!("lutra-pi: static binary {:.1} MiB", size as f64 / (1 << 20) as f64);
    // refused, with a message, before any import
    let refused = |file: &Path, why: &str| -> Result {
        let out = Command::new("qemu-aarch64").arg(&pi).arg(file).args(["-p", prompt, "-n", "4"]).output().map_err(|e| e.to_string())?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains(why) {
            return Err(format!("lutra-pi on {}: expected a refusal mentioning {why:?}, got {}: {err}", file.display(), out.status));
        }
        println!("lutra-pi refuses {}: {}", file.display(), err.trim());
        Ok(())
    };
    refused(&checkpoint, "not a packed .lutra model")?;
    let truncated = dir.join("truncated.lutra");
    let bytes = fs::read(&packed).map_err(|e| e.to_string())?;
    fs::write(&truncated, &bytes[..bytes.len() / 2]).map_err(|e| e.to_string())?;
    refused(&truncated, "truncated")?;
    ci.counts.push((
        "lutra-pi under qemu-aarch64 (stories15M, a Q1_0 qwen3 file, Gemma 3: text = x86; Qwen 0.5B chat, two turns = x86; 2 refusals)"
            .into(),
        6,
    ));

    // peak RSS of the x86 build (qemu-user's own would be measured under emulation):
    // the arena's used part, the mapped file and at most 6 MiB besides
    let native_pi = ci.target_dir.join("release/lutra-pi");
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-embedded", "--bin", "lutra-pi"]))?;
    ctrl_c_stops_an_answer(&native_pi, &qwen_packed)?;
    // a session bigger than the compile-time arena (sized for 4 096 positions): refused
    // before it starts
    let out = Command::new(&native_pi)
        .arg(&qwen_packed)
        .args(["-p", "def fib(n):", "-n", "4", "-c", "32768"])
        .output()
        .map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(1) || !err.contains("does not fit") {
        return Err(format!("lutra-pi with Qwen 0.5B at 32 768 positions: expected a refusal (exit 1), got {}: {err}", out.status));
    }
    println!("{}", err.trim());
    // the class's models at the class's context
    let mut rss_runs = vec![(packed.clone(), prompt, "256"), (qwen_packed, "def fib(n):", "4096")];
    if gemma.exists() {
        rss_runs.push((gemma_packed, "Otters are", "4096"));
    }
    for (file, prompt, context) in rss_runs {
        let mut c = Command::new("/usr/bin/time");
        c.arg("-v").arg(&native_pi).arg(&file).args(["-p", prompt, "-n", "32", "--temp", "0", "-c", context]);
        let (_, stats) = stdout(&mut c)?;
        let number_after = |key: &str| -> Option<u64> { stats.split(key).nth(1)?.split_whitespace().next()?.parse().ok() };
        let arena_peak_mib = stats.split(", peak ").nth(1).and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok());
        let (Some(rss_kib), Some(arena_peak_mib)) = (number_after("Maximum resident set size (kbytes):"), arena_peak_mib) else {
            return Err(format!("lutra-pi on {}: no peak RSS or arena peak in\n{stats}", file.display()));
        };
        // the arena is `.bss`: resident only as far as it was used
        let arena_peak = (arena_peak_mib * (1 << 20) as f64) as u64;
        let mapped = fs::metadata(&file).map_err(|e| e.to_string())?.len();
        let bound = arena_peak + mapped + (6 << 20);
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "lutra-pi (x86) on {}: peak RSS {:.1} MiB <= arena's peak {:.1} + file {:.1} + 6 MiB (binary, libc, stacks) = {:.1} MiB?",
            file.display(),
            mib(rss_kib * 1024),
            mib(arena_peak),
            mib(mapped),
            mib(bound)
        );
        if rss_kib * 1024 > bound {
            return Err(format!("lutra-pi on {}: peak RSS {rss_kib} KiB over {bound} bytes\n{stats}", file.display()));
        }
        // the import stayed within what the header promised (the refusal before import)
        let (Some(import_peak), Some(import_bound)) = (number_after("import peak "), number_after(", bound ")) else {
            return Err(format!("lutra-pi on {}: no import peak and bound in\n{stats}", file.display()));
        };
        println!("lutra-pi (x86) on {}: import peak {import_peak} <= bound {import_bound} bytes?", file.display());
        if import_peak > import_bound {
            return Err(format!("lutra-pi on {}: the import took {import_peak} bytes, over its bound {import_bound}", file.display()));
        }
    }

    // bare metal: the same file embedded in a kernel8.img, booted on an emulated Pi 3
    let (tokens, metal_prompt) = ("16", "Once upon a time"); // lutra-metal's TOKENS and PROMPT
    let (on_x86, _) =
        stdout(Command::new(&lutra).arg("run").arg("-m").arg(&packed).args(["-p", metal_prompt, "-n", tokens, "--temp", "0", "-t", "1"]))?;
    // a Pi 3 (plain UART, defmt frames) and a Pi 4 (another memory map and UART, on qemu
    // 10 from bookworm-backports)
    let images = [
        (false, Board::Raspi3b, "kernel8.img"),
        (true, Board::Raspi3b, "kernel8-defmt.img"),
        (false, Board::Raspi4b, "kernel8-raspi4b.img"),
    ];
    for (defmt, board, image) in images {
        let (code, uart) = boot_metal(ci, &packed, &dir.join(image), defmt, board)?;
        let text = uart.split_once("--- text ---\n").and_then(|(_, rest)| rest.split_once("\n--- end ---")).map(|(text, _)| text);
        let refusals = uart.lines().filter(|l| l.starts_with("refuses a ")).count();
        let on_board = uart.starts_with(&format!("lutra-metal on {}", board.machine()));
        if code != Some(0) || text != Some(on_x86.as_str()) || refusals != 3 || !on_board {
            return Err(format!(
                "the bare-metal image {image} ({}) exited with {code:?}, {refusals} of 3 damaged copies refused, text {text:?}\n  the x86 CLI (best tier) wrote {on_x86:?}\nUART:\n{uart}",
                board.machine()
            ));
        }
        println!("bare metal {image} (qemu -M {}): NEON text = x86 best-tier text; 3 damaged copies refused", board.machine());
    }
    // a model that does not fit the image's compile-time arena (sized for stories15M):
    // the 1-bit qwen3 file's 151 936-token vocabulary, refused before its import
    let (code, uart) = boot_metal(ci, &one_bit, &dir.join("kernel8-qwen3.img"), false, Board::Raspi3b)?;
    if code != Some(1) || !uart.contains("refused: the model does not fit") {
        return Err(format!("the bare-metal image with the qwen3 file: expected exit 1 and a refusal, got {code:?}\nUART:\n{uart}"));
    }
    println!("bare metal refuses a model bigger than its arena: {}", uart.lines().last().unwrap_or_default());
    ci.counts.push(("bare-metal image under qemu -M raspi3b (plain UART, defmt) and -M raspi4b (text = x86, 10 refusals)".into(), 13));
    ci.ran("neon", "bare metal (qemu -M raspi3b, raspi4b)");
    Ok(())
}

/// `lutra-pi chat`: Ctrl-C (SIGINT) while an answer streams stops that answer, and the
/// conversation goes on to the next turn.
fn ctrl_c_stops_an_answer(pi: &Path, model: &Path) -> Result {
    let mut c = Command::new(pi);
    c.arg("chat").arg(model).args(["-n", "400", "--temp", "0"]);
    println!("$ {} (Ctrl-C during the first answer)", show(&c));
    let mut child =
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("`{}`: {e}", show(&c)))?;
    let (mut stdin, mut stdout) = (child.stdin.take().ok_or("no stdin")?, child.stdout.take().ok_or("no stdout")?);
    let io = |e: std::io::Error| format!("lutra-pi chat: {e}");
    stdin.write_all(b"Write a long story about an otter, in ten chapters.\n").and_then(|_| stdin.flush()).map_err(io)?;
    // the answer is streaming once its first byte is out
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).map_err(io)?;
    run(Command::new("kill").args(["-INT", &child.id().to_string()]))?;
    stdin.write_all(b"Now one sentence about a heron.\n").map_err(io)?;
    drop(stdin);
    let mut text = Vec::from(first);
    stdout.read_to_end(&mut text).map_err(io)?;
    let out = child.wait_with_output().map_err(io)?;
    let err = String::from_utf8_lossy(&out.stderr);
    let turns: Vec<&str> = err.lines().filter(|l| l.contains(" new prompt tokens, ")).collect();
    let stopped_first = turns.first().and_then(|t| t.split(", ").nth(1)?.split(' ').next()?.parse::<usize>().ok()).is_some_and(|n| n < 400);
    if !out.status.success() || turns.len() != 2 || !err.contains("(stopped)") || !stopped_first {
        return Err(format!("lutra-pi chat with Ctrl-C during the first answer: {} with\n{err}", out.status));
    }
    println!("lutra-pi chat: Ctrl-C stopped the first answer ({}); the second turn answered ({})", turns[0], turns[1]);
    Ok(())
}

/// Runs `c` with `input` on its stdin: its stdout (trailing whitespace trimmed) and stderr.
fn with_input(c: &mut Command, input: &str) -> Result<(String, String)> {
    match input {
        "" => println!("$ {}", show(c)),
        _ => println!("$ {} <<< {input:?}", show(c)),
    }
    let mut child =
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("`{}`: {e}", show(c)))?;
    child.stdin.take().ok_or("no stdin")?.write_all(input.as_bytes()).map_err(|e| format!("`{}`: {e}", show(c)))?;
    let out = child.wait_with_output().map_err(|e| format!("`{}`: {e}", show(c)))?;
    let (text, err) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    if !out.status.success() {
        return Err(format!("`{}` exited with {}: {err}", show(c), out.status));
    }
    Ok((text.trim_end().to_string(), err))
}

/// Builds lutra-metal with `model` embedded (`defmt`: its UART carries defmt frames),
/// writes the raw `image`, boots it on `qemu-system-aarch64 -M raspi3b` (semihosting
/// exit, a timeout in case it hangs) and returns qemu's exit code and what the UART
/// printed (decoded by `defmt-print` for a defmt image).
fn boot_metal(ci: &Ci, model: &Path, image: &Path, defmt: bool, board: Board) -> Result<(Option<i32>, String)> {
    let mut build = cargo(&ci.root);
    build.args(["build", "--release", "-p", "lutra-metal", "--target", BARE_METAL]).env("LUTRA_METAL_MODEL", model);
    if defmt {
        build.args(["--features", "defmt"]).env("DEFMT_LOG", "info");
    }
    let qemu_binary = match board {
        Board::Raspi3b => PathBuf::from("qemu-system-aarch64"),
        Board::Raspi4b => {
            build.args(["--features", "raspi4b"]);
            backports_qemu(&ci.target_dir)?
        }
    };
    run(&mut build)?;
    let elf = ci.target_dir.join(BARE_METAL).join("release/lutra-metal");
    run(Command::new("aarch64-linux-gnu-objcopy").args(["-O", "binary"]).arg(&elf).arg(image))?;
    let mut qemu = Command::new("timeout");
    qemu.arg("300")
        .arg(&qemu_binary)
        .args(["-M", board.machine(), "-serial", "stdio", "-display", "none", "-semihosting", "-kernel"])
        .arg(image);
    println!("$ {}", show(&qemu));
    let out = qemu.stdin(Stdio::null()).output().map_err(|e| format!("`{}`: {e}", show(&qemu)))?;
    let uart = if defmt {
        let mut decode = Command::new("defmt-print");
        decode.arg("-e").arg(&elf);
        println!("$ ... | {}", show(&decode));
        let mut child = decode.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().map_err(|e| format!("defmt-print: {e}"))?;
        child.stdin.take().ok_or("defmt-print: no stdin")?.write_all(&out.stdout).map_err(|e| format!("defmt-print: {e}"))?;
        let decoded = child.wait_with_output().map_err(|e| format!("defmt-print: {e}"))?;
        println!("({} bytes of defmt frames on the UART)", out.stdout.len());
        String::from_utf8_lossy(&decoded.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    print!("{uart}");
    Ok((out.status.code(), uart))
}

/// The Raspberry Pi boards the bare-metal image is built and booted for.
#[derive(Clone, Copy)]
enum Board {
    Raspi3b,
    Raspi4b,
}

impl Board {
    fn machine(self) -> &'static str {
        match self {
            Board::Raspi3b => "raspi3b",
            Board::Raspi4b => "raspi4b",
        }
    }
}

/// `qemu-system-aarch64` 10 from Debian's bookworm-backports (Debian 12's 7.2 has no
/// `raspi4b`), unpacked under the target dir rather than installed, so every other step
/// keeps the system's qemu. Adds the backports suite to apt's sources (at the default
/// low priority: nothing else is upgraded) the first time.
fn backports_qemu(target_dir: &Path) -> Result<PathBuf> {
    let dir = target_dir.join("qemu-backports");
    let binary = dir.join("usr/bin/qemu-system-aarch64");
    if binary.exists() {
        return Ok(binary);
    }
    let sources = Path::new("/etc/apt/sources.list.d/backports.sources");
    if !sources.exists() {
        let debian = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").map_err(|e| format!("debian.sources: {e}"))?;
        // the first stanza (the main mirror), with the suite swapped
        let first: Vec<String> = debian
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| !l.starts_with('#'))
            .map(|l| if l.starts_with("Suites:") { "Suites: bookworm-backports".to_string() } else { l.to_string() })
            .collect();
        fs::write(sources, first.join("\n") + "\n").map_err(|e| format!("{}: {e}", sources.display()))?;
        run(Command::new("apt-get").args(["update", "-q"]))?;
    }
    let download = dir.join("download");
    fs::create_dir_all(&download).map_err(|e| format!("{}: {e}", download.display()))?;
    run(Command::new("apt-get").args(["download", "-q", "qemu-system-arm/bookworm-backports"]).current_dir(&download))?;
    let deb = fs::read_dir(&download)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&dir))?;
    let version = run_capture(Command::new(&binary).arg("--version"))?;
    expect_contains(&version, "version 10.", "backports qemu-system-aarch64")?;
    Ok(binary)
}
