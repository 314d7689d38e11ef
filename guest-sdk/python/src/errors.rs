//! How a failed script is reported: monty's exceptions as [`ScriptError`]s.

use monty_types::MontyException;
use tether_guest::ScriptError;

/// The file name tracebacks give the script.
pub const SCRIPT_NAME: &str = "main.py";

/// The kind of a script that could not be compiled.
pub const SYNTAX_ERROR: &str = "syntax_error";
/// The kind of a script that raised, or whose result could not be reported.
pub const RUNTIME_ERROR: &str = "runtime_error";

/// A script that failed to compile. Every compile failure counts, not only
/// `SyntaxError`: the script never started either way, and `exception_type`
/// still names what monty raised.
pub fn syntax_error(exception: &MontyException) -> ScriptError {
    from_exception(SYNTAX_ERROR, exception)
}

/// A script that raised an exception nobody caught.
pub fn runtime_error(exception: &MontyException) -> ScriptError {
    from_exception(RUNTIME_ERROR, exception)
}

fn from_exception(kind: &str, exception: &MontyException) -> ScriptError {
    let exception_type = exception.exc_type().to_string();
    let message = match exception.message() {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => exception_type.clone(),
    };
    // The innermost frame of the script itself: frames of code run by
    // `exec()`/`eval()` carry another file name and no script line.
    let line = exception
        .traceback()
        .iter()
        .rev()
        .find(|frame| frame.filename == SCRIPT_NAME)
        .map_or(0, |frame| frame.start.line);
    ScriptError { kind: kind.to_owned(), message, exception_type, traceback: exception.to_string(), line, limit: String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use monty_types::{CodeLoc, ExcType, StackFrame};

    fn frame(filename: &str, line: u32) -> StackFrame {
        StackFrame {
            filename: filename.into(),
            start: CodeLoc { line, column: 1 },
            end: CodeLoc { line, column: 2 },
            frame_name: None,
            preview_line: None,
            hide_caret: false,
            hide_frame_name: false,
        }
    }

    #[test]
    fn the_innermost_script_frame_gives_the_line() {
        let exception = MontyException::with_traceback(
            ExcType::ValueError,
            Some("bad".into()),
            vec![frame(SCRIPT_NAME, 3), frame(SCRIPT_NAME, 9), frame("<string>", 1)],
        );
        let error = runtime_error(&exception);
        assert_eq!(error.kind, RUNTIME_ERROR);
        assert_eq!(error.exception_type, "ValueError");
        assert_eq!(error.message, "bad");
        assert_eq!(error.line, 9);
        assert!(error.traceback.ends_with("ValueError: bad"));
    }

    #[test]
    fn an_exception_without_message_is_named_by_its_type() {
        let error = syntax_error(&MontyException::new(ExcType::SyntaxError, None));
        assert_eq!(error.kind, SYNTAX_ERROR);
        assert_eq!(error.message, "SyntaxError");
        assert_eq!(error.line, 0);
    }
}
