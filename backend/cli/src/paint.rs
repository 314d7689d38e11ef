//! Colour for what a person reads on stderr: ok in green, a tool's error in
//! yellow, a failure in red, an approval prompt in bold yellow — only when
//! stderr is a terminal and `NO_COLOR` is not set, so a file or a pipe gets
//! plain text.

use anstyle::{AnsiColor, Style};
use std::sync::OnceLock;

/// What a piece of text says, and so its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// It worked.
    Ok,
    /// The tool answered with an error (it ran).
    Warn,
    /// Refused, denied, failed or ended.
    Failed,
    /// A person is asked.
    Ask,
}

impl Tone {
    fn style(self) -> Style {
        match self {
            Tone::Ok => AnsiColor::Green.on_default(),
            Tone::Warn => AnsiColor::Yellow.on_default(),
            Tone::Failed => AnsiColor::Red.on_default(),
            Tone::Ask => AnsiColor::Yellow.on_default().bold(),
        }
    }
}

/// Whether stderr gets colour: a terminal, and no `NO_COLOR` (no-color.org).
pub fn colour_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        use std::io::IsTerminal as _;
        std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    })
}

/// `text` in `tone`'s colour when `on`, else as it is.
pub fn paint_if(on: bool, tone: Tone, text: &str) -> String {
    if on {
        let style = tone.style();
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_owned()
    }
}

/// `text` in `tone`'s colour when stderr gets colour ([`colour_on`]).
pub fn paint(tone: Tone, text: &str) -> String {
    paint_if(colour_on(), tone, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_wraps_the_text_only_when_on() {
        assert_eq!(paint_if(false, Tone::Failed, "✗ c1"), "✗ c1");
        let red = paint_if(true, Tone::Failed, "✗ c1");
        assert!(red.starts_with("\u{1b}[31m") && red.ends_with("\u{1b}[0m") && red.contains("✗ c1"), "{red:?}");
        assert_ne!(paint_if(true, Tone::Ok, "ok"), paint_if(true, Tone::Warn, "ok"));
    }
}
