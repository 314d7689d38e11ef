//! Repairs to two faults of monty 1.4.0's tracebacks, so a script's author
//! sees what CPython would show.
//!
//! - A call of an undefined name reaches the host as an external function
//!   call; answered "not found", monty raises the `NameError` with the caret
//!   under the whole call (`snap(1)`) instead of the name (`snap`).
//! - A bare `raise` is compiled without a source location, so when it finds
//!   no active exception its frame names the file `"\0"` at line 1 and shows
//!   the wrong source line.

use std::sync::Arc;

use monty_types::{CodeLoc, ExcType, MontyException, StackFrame};

use crate::errors::SCRIPT_NAME;

/// The file name monty gives a frame it has no location for.
const NO_FILE: &str = "\0";

/// `exception` with its traceback repaired; `source` is the script.
pub fn repair(exception: &MontyException, source: &str) -> MontyException {
    let mut frames = exception.traceback().to_vec();
    let mut changed = false;
    if exception.exc_type() == ExcType::NameError
        && let Some(name) = exception.message().and_then(undefined_name)
        && let Some(frame) = frames.last_mut()
    {
        changed |= narrow_caret_to(frame, name);
    }
    if frames.iter().any(|frame| frame.filename == NO_FILE) {
        let bare_raise = unique_bare_raise(source);
        frames.retain_mut(|frame| frame.filename != NO_FILE || locate_at(frame, bare_raise));
        changed = true;
    }
    if !changed {
        return exception.clone();
    }
    MontyException::with_traceback(exception.exc_type(), exception.message().map(str::to_owned), frames)
}

/// `X` in monty's `name 'X' is not defined`.
fn undefined_name(message: &str) -> Option<&str> {
    message.strip_prefix("name '")?.strip_suffix("' is not defined")
}

/// Puts the caret under `name` when the frame's range starts with it and
/// covers more (the call around it). Returns whether it changed.
fn narrow_caret_to(frame: &mut StackFrame, name: &str) -> bool {
    let Some(line) = frame.preview_line.as_deref() else { return false };
    let width = u32::try_from(name.chars().count()).unwrap_or(u32::MAX);
    let start = frame.start.column.saturating_sub(1) as usize;
    let starts_with_name = line.chars().skip(start).take(name.chars().count()).eq(name.chars());
    if frame.start.line != frame.end.line || !starts_with_name || frame.end.column <= frame.start.column + width {
        return false;
    }
    frame.end.column = frame.start.column + width;
    true
}

/// The script's only bare `raise` statement, as (line number, line), if it
/// has exactly one: then a frame without location must be that one.
fn unique_bare_raise(source: &str) -> Option<(u32, &str)> {
    let mut found = source.lines().enumerate().filter(|(_, line)| {
        let code = line.split('#').next().unwrap_or_default();
        code.trim() == "raise"
    });
    let (index, line) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    Some((u32::try_from(index + 1).ok()?, line))
}

/// Gives a frame without location the bare `raise` it must come from; false
/// (drop the frame) when the script has none or several: no location is
/// better than a wrong one.
fn locate_at(frame: &mut StackFrame, bare_raise: Option<(u32, &str)>) -> bool {
    let Some((line_number, line)) = bare_raise else { return false };
    let indent = line.len() - line.trim_start().len();
    let column = u32::try_from(indent + 1).unwrap_or(1);
    frame.filename = SCRIPT_NAME.to_owned();
    frame.start = CodeLoc { line: line_number, column };
    frame.end = CodeLoc { line: line_number, column: column + 5 };
    frame.preview_line = Some(Arc::from(line));
    // CPython shows no caret under a `raise`.
    frame.hide_caret = true;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(filename: &str, line: u32, columns: (u32, u32), preview: &str) -> StackFrame {
        StackFrame {
            filename: filename.into(),
            start: CodeLoc { line, column: columns.0 },
            end: CodeLoc { line, column: columns.1 },
            frame_name: None,
            preview_line: Some(Arc::from(preview)),
            hide_caret: false,
            hide_frame_name: false,
        }
    }

    fn name_error(frame: StackFrame) -> MontyException {
        MontyException::with_traceback(ExcType::NameError, Some("name 'snap' is not defined".into()), vec![frame])
    }

    #[test]
    fn a_name_errors_caret_covers_the_name_not_the_call() {
        let repaired = repair(&name_error(frame(SCRIPT_NAME, 2, (5, 12), "    snap(1)")), "");
        let frame = &repaired.traceback()[0];
        assert_eq!((frame.start.column, frame.end.column), (5, 9));
        assert!(repaired.to_string().contains("    snap(1)\n    ~~~~\n"), "{repaired}");
    }

    #[test]
    fn a_name_error_already_under_the_name_is_left_alone() {
        let exception = name_error(frame(SCRIPT_NAME, 1, (7, 11), "print(snap)"));
        assert_eq!(repair(&exception, ""), exception);
        // A range that does not start with the name is not guessed at.
        let exception = name_error(frame(SCRIPT_NAME, 1, (1, 11), "x = snap(1)"));
        assert_eq!(repair(&exception, ""), exception);
    }

    #[test]
    fn a_bare_raise_without_location_gets_its_line() {
        let source = "def f():\n    raise  # again\nf()\n";
        let exception = MontyException::with_traceback(
            ExcType::RuntimeError,
            Some("No active exception to reraise".into()),
            vec![frame(SCRIPT_NAME, 3, (1, 4), "f()"), frame(NO_FILE, 1, (1, 2), "def f():")],
        );
        let repaired = repair(&exception, source);
        let frame = &repaired.traceback()[1];
        assert_eq!((frame.filename.as_str(), frame.start.line, frame.hide_caret), (SCRIPT_NAME, 2, true));
        assert!(repaired.to_string().contains("line 2, in <module>\n    raise  # again\n"), "{repaired}");
    }

    #[test]
    fn a_frame_without_location_is_dropped_when_the_raise_is_ambiguous() {
        let source = "try:\n    raise\nexcept RuntimeError:\n    raise\n";
        let exception = MontyException::with_traceback(
            ExcType::RuntimeError,
            Some("No active exception to reraise".into()),
            vec![frame(NO_FILE, 1, (1, 2), "try:")],
        );
        let repaired = repair(&exception, source);
        assert!(repaired.traceback().is_empty());
        assert!(!repaired.to_string().contains('\0'));
    }
}
