//! Stop strings over streamed text: text is released as soon as it cannot be the start
//! of a stop string, so a stream never shows a stop string's first half.

pub struct StopFilter {
    stops: Vec<String>,
    /// Text not yet released: it ends with what could begin a stop string.
    held: String,
}

impl StopFilter {
    /// Empty stop strings are ignored (they would end every text before it starts).
    pub fn new(stops: Vec<String>) -> StopFilter {
        StopFilter { stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), held: String::new() }
    }

    /// Adds `piece`; returns the text that can be released and whether a stop string
    /// was found (the text then ends just before it, and nothing more may follow). A
    /// stop string found behind the start of a longer one that may still complete waits
    /// for it, so the earliest one in the whole text wins.
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        let found = self.first_stop();
        let pending = self.held.len() - self.stops.iter().map(|s| partial_suffix(&self.held, s)).max().unwrap_or(0);
        match found {
            Some(at) if at <= pending => {
                self.held.truncate(at);
                (std::mem::take(&mut self.held), true)
            }
            _ => {
                let rest = self.held.split_off(found.map_or(pending, |at| at.min(pending)));
                (std::mem::replace(&mut self.held, rest), false)
            }
        }
    }

    /// What is held when the text ends, up to a stop string if it holds one (and
    /// whether it did).
    pub fn finish(&mut self) -> (String, bool) {
        let found = self.first_stop();
        if let Some(at) = found {
            self.held.truncate(at);
        }
        (std::mem::take(&mut self.held), found.is_some())
    }

    fn first_stop(&self) -> Option<usize> {
        self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min()
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1)).rev().find(|&n| stop.is_char_boundary(n) && text.ends_with(&stop[..n])).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::StopFilter;

    /// Every way of cutting `text` into two or three pieces gives the same released text
    /// as `str::find` on the whole.
    #[test]
    fn matches_find_however_the_text_is_cut() {
        let stops = vec!["\n\n".to_string(), "User:".to_string(), "é!".to_string(), "abcd".to_string(), "bc".to_string()];
        for text in
            ["Hello there.\n\nUser: hi", "no stop here", "ab User", "Usé!r", "x\n", "caf\u{e9}!", "UseUser:", "xabcd", "xabce", "xabc"]
        {
            let expected = stops.iter().filter_map(|s| text.find(s.as_str())).min();
            let whole = &text[..expected.unwrap_or(text.len())];
            let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
            for &a in &cuts {
                for &b in cuts.iter().filter(|&&b| b >= a) {
                    let mut f = StopFilter::new(stops.clone());
                    let mut out = String::new();
                    let mut stopped = false;
                    for piece in [&text[..a], &text[a..b], &text[b..]] {
                        let (released, s) = f.push(piece);
                        out.push_str(&released);
                        if s {
                            stopped = true;
                            break;
                        }
                    }
                    if !stopped {
                        let (rest, s) = f.finish();
                        out.push_str(&rest);
                        stopped = s;
                    }
                    assert_eq!((out.as_str(), stopped), (whole, expected.is_some()), "{text:?} cut at {a}, {b}");
                }
            }
        }
    }

    #[test]
    fn releases_text_that_cannot_start_a_stop_string_at_once() {
        let mut f = StopFilter::new(vec!["</answer>".into()]);
        assert_eq!(f.push("The otter </ans"), ("The otter ".to_string(), false));
        assert_eq!(f.push("wer"), (String::new(), false));
        assert_eq!(f.push("x> more"), ("</answerx> more".to_string(), false));
    }
}
