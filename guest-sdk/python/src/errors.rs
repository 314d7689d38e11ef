//! How a failed script is reported: monty's exceptions as [`ScriptError`]s.

use monty_types::{ExcType, MontyException};
use tether_codes::RunErrorKind;
use tether_guest::ScriptError;

/// The file name tracebacks give the script.
pub const SCRIPT_NAME: &str = "main.py";

/// A script that failed to compile. Every compile failure counts, not only
/// `SyntaxError`: the script never started either way, and `exception_type`
/// still names what monty raised.
pub fn syntax_error(exception: &MontyException) -> ScriptError {
    from_exception(RunErrorKind::SyntaxError, exception)
}

/// A script that raised an exception nobody caught.
pub fn runtime_error(exception: &MontyException) -> ScriptError {
    from_exception(RunErrorKind::RuntimeError, exception)
}

/// A limit the runtime enforces, raised uncatchably with `exception` so it
/// carries the script's traceback: `limit` gets the line and the traceback,
/// whose last line names the limit instead of the carrier exception.
pub fn limit_error(mut limit: ScriptError, exception: &MontyException) -> ScriptError {
    let traceback = exception.to_string();
    let frames = traceback.rsplit_once('\n').map_or("", |(frames, _)| frames);
    limit.traceback = if frames.is_empty() {
        format!("{}: {}", limit.kind, limit.message)
    } else {
        format!("{frames}\n{}: {}", limit.kind, limit.message)
    };
    limit.line = script_line(exception);
    limit
}

/// What `sys.stdout` and `sys.stderr` do have: `write()` and `flush()`
/// (third_party/monty's patch 0001); any other method is an
/// `AttributeError` naming `_io.TextIOWrapper`.
const STREAM_METHOD_HINT: &str = "in Tether's Python (monty) sys.stdout and sys.stderr have only write(str) and flush(); \
     print(..., file=sys.stderr) works too";

fn from_exception(kind: RunErrorKind, exception: &MontyException) -> ScriptError {
    let exception_type = exception.exc_type().to_string();
    let mut message = match exception.message() {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => exception_type.clone(),
    };
    let mut traceback = exception.to_string();
    if exception.exc_type() == ExcType::AttributeError
        && message.starts_with("'_io.TextIOWrapper' object has no attribute")
    {
        message = format!("{message} ({STREAM_METHOD_HINT})");
        traceback = format!("{traceback} ({STREAM_METHOD_HINT})");
    }
    ScriptError {
        kind: kind.as_str().to_owned(),
        message,
        exception_type,
        traceback,
        line: script_line(exception),
        ..ScriptError::default()
    }
}

/// The innermost frame of the script itself: frames of code run by
/// `exec()`/`eval()` carry another file name and no script line.
fn script_line(exception: &MontyException) -> u32 {
    exception.traceback().iter().rev().find(|frame| frame.filename == SCRIPT_NAME).map_or(0, |frame| frame.start.line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use monty_types::{CodeLoc, StackFrame};

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
        assert_eq!(error.kind, "runtime_error");
        assert_eq!(error.exception_type, "ValueError");
        assert_eq!(error.message, "bad");
        assert_eq!(error.line, 9);
        assert!(error.traceback.ends_with("ValueError: bad"));
    }

    #[test]
    fn an_exception_without_message_is_named_by_its_type() {
        let error = syntax_error(&MontyException::new(ExcType::SyntaxError, None));
        assert_eq!(error.kind, "syntax_error");
        assert_eq!(error.message, "SyntaxError");
        assert_eq!(error.line, 0);
    }
}
