//! A one-line progress bar on stderr for long loads: redrawn at most 10 times a second
//! on a terminal; elsewhere (logs, pipes) one line when the work is done.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A progress bar over a fixed number of units of work.
pub struct Progress {
    label: String,
    total: usize,
    start: Instant,
    last_draw: Option<Instant>,
    terminal: bool,
}

const WIDTH: usize = 30;

impl Progress {
    /// A bar labelled `label` for `total` units (at least 1); nothing is drawn until `update`.
    pub fn new(label: impl Into<String>, total: usize) -> Progress {
        Progress {
            label: label.into(),
            total: total.max(1),
            start: Instant::now(),
            last_draw: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// `done` of `total` units finished; `what` names the current one.
    pub fn update(&mut self, done: usize, what: &str) {
        let now = Instant::now();
        let finished = done >= self.total;
        if !self.terminal || (!finished && self.last_draw.is_some_and(|t| now - t < Duration::from_millis(100))) {
            return;
        }
        self.last_draw = Some(now);
        let filled = WIDTH * done.min(self.total) / self.total;
        let bar: String = "█".repeat(filled) + &"░".repeat(WIDTH - filled);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K{} {bar} {:>3}% {done}/{} {:.1} s  {}",
            self.label,
            100 * done.min(self.total) / self.total,
            self.total,
            self.start.elapsed().as_secs_f64(),
            what
        );
        let _ = err.flush();
    }

    /// Ends the bar's line for work that failed: nothing is reported done.
    pub fn abandon(&mut self) {
        if self.terminal && self.last_draw.is_some() {
            let _ = writeln!(std::io::stderr().lock());
        }
    }

    /// Ends the bar's line (and, off a terminal, prints the one summary line).
    pub fn finish(&mut self) {
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = writeln!(err);
        } else {
            let _ = writeln!(err, "{}: {} done in {:.1} s", self.label, self.total, self.start.elapsed().as_secs_f64());
        }
    }
}
