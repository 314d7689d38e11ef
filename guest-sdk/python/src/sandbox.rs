//! What the script gets when it reaches for the operating system: files,
//! the environment, modules monty does not ship. In Tether every effect goes
//! through a tool call, so these are refused with a Python exception that
//! says so. Sleeps are the one OS call honoured, within the run's budget
//! (`crate::sleep`).

use std::time::Duration;

use monty_types::{ExcType, MontyException, OsFunctionCall};

/// Why the OS is closed, appended to every refusal.
pub(crate) const EFFECTS_GO_THROUGH_TOOLS: &str = "every effect goes through a tool call";

/// The modules a script can import, sorted: those monty ships (its
/// `StandardLib`, so a module a patch adds counts at once). The one list
/// that both the refusal of an import at run time and the check before the
/// script runs (`crate::check`) read.
pub fn importable_modules() -> Vec<&'static str> {
    let mut modules = monty::builtin_module_names();
    modules.sort_unstable();
    modules
}

/// How the runner answers one OS call.
#[derive(Debug)]
pub enum OsAnswer {
    /// Raise this exception at the call site.
    Refuse(MontyException),
    /// `time.sleep`: wait, then answer `None`.
    Sleep(Duration),
    /// `asyncio.sleep`: an awaitable that completes after this long.
    AsyncSleep(Duration),
}

/// Decides how to answer `call`.
pub fn answer(call: &OsFunctionCall) -> OsAnswer {
    use OsFunctionCall as Os;
    match call {
        // Uncapped: the run's sleep budget (`crate::sleep`) judges the whole request.
        Os::Sleep(duration) | Os::SystemSleep(duration) => OsAnswer::Sleep(*duration),
        Os::AsyncSleep(duration) | Os::AsyncSystemSleep(duration) => OsAnswer::AsyncSleep(*duration),
        Os::Import(module) => OsAnswer::Refuse(module_not_found(module)),
        Os::Getenv(_) | Os::GetEnviron => OsAnswer::Refuse(MontyException::new(
            ExcType::PermissionError,
            Some(format!("environment access is not available in Tether scripts: {EFFECTS_GO_THROUGH_TOOLS}")),
        )),
        // monty reads the clock and entropy itself under the default policy;
        // these arrive only under a host policy this runtime does not set.
        Os::DateToday | Os::DateTimeNow(_) | Os::Time(_) | Os::Urandom(_) | Os::ImportStubs(_) => {
            OsAnswer::Refuse(MontyException::new(
                ExcType::NotImplementedError,
                Some(format!("{} is not available in Tether scripts", call.name())),
            ))
        }
        // Everything else touches the file system.
        _ => OsAnswer::Refuse(MontyException::new(
            ExcType::PermissionError,
            Some(format!(
                "file access is not available in Tether scripts ({} refused): {EFFECTS_GO_THROUGH_TOOLS}",
                call.name()
            )),
        )),
    }
}

/// The `ModuleNotFoundError` for a module monty does not provide, listing
/// the ones it does.
fn module_not_found(module: &str) -> MontyException {
    let available = importable_modules();
    MontyException::new(
        ExcType::ModuleNotFoundError,
        Some(format!(
            "No module named '{module}': Tether scripts can import only {}; {EFFECTS_GO_THROUGH_TOOLS}",
            available.join(", ")
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(call: OsFunctionCall) -> MontyException {
        match answer(&call) {
            OsAnswer::Refuse(exception) => exception,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn imports_list_the_available_modules() {
        let exception = refusal(OsFunctionCall::Import("requests".into()));
        assert_eq!(exception.exc_type(), ExcType::ModuleNotFoundError);
        let message = exception.message().unwrap_or_default();
        assert!(message.starts_with("No module named 'requests'"), "{message}");
        assert!(message.contains("json"), "{message}");
    }

    #[test]
    fn the_environment_is_closed() {
        assert_eq!(refusal(OsFunctionCall::GetEnviron).exc_type(), ExcType::PermissionError);
    }

    #[test]
    fn sleeps_are_passed_on_uncapped() {
        let hour = Duration::from_secs(3600);
        assert!(matches!(answer(&OsFunctionCall::Sleep(hour)), OsAnswer::Sleep(duration) if duration == hour));
        assert!(
            matches!(answer(&OsFunctionCall::AsyncSleep(hour)), OsAnswer::AsyncSleep(duration) if duration == hour)
        );
    }
}
