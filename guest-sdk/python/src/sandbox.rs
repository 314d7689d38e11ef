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

/// Modules whose work is an effect outside the script (network, files,
/// processes, mail, databases, the OS): a script does that work through the
/// turn's tools. Any other module a script lacks is computation the runtime
/// does not have, which the script can write with the modules it has. Only
/// the wording of the refusal depends on this list.
const EFFECT_MODULES: &[&str] = &[
    "aiohttp",
    "asynchat",
    "asyncore",
    "boto3",
    "concurrent",
    "ctypes",
    "fcntl",
    "ftplib",
    "glob",
    "grp",
    "http",
    "httpx",
    "imaplib",
    "mmap",
    "multiprocessing",
    "nntplib",
    "paramiko",
    "poplib",
    "psycopg",
    "psycopg2",
    "pty",
    "pwd",
    "pymysql",
    "redis",
    "requests",
    "resource",
    "select",
    "selectors",
    "shutil",
    "signal",
    "smtplib",
    "socket",
    "socketserver",
    "sqlite3",
    "ssl",
    "subprocess",
    "tempfile",
    "telnetlib",
    "termios",
    "threading",
    "tty",
    "urllib",
    "urllib3",
    "webbrowser",
    "wsgiref",
    "xmlrpc",
];

/// Why `module` does not import, in words the model can act on: an effect
/// goes through a tool call; anything else the script writes itself.
pub(crate) fn why_not_importable(module: &str) -> String {
    let top = module.split('.').next().unwrap_or(module);
    if EFFECT_MODULES.contains(&top) {
        format!("{EFFECTS_GO_THROUGH_TOOLS}: do its work with the turn's tools")
    } else {
        "this runtime does not have it: write what it would give with the modules there are".to_owned()
    }
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
            "No module named '{module}': {}; Tether scripts can import only {}",
            why_not_importable(module),
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
        assert!(message.contains(EFFECTS_GO_THROUGH_TOOLS), "{message}");
    }

    #[test]
    fn a_module_that_only_computes_is_not_sent_to_the_tools() {
        let exception = refusal(OsFunctionCall::Import("numpy".into()));
        let message = exception.message().unwrap_or_default();
        assert!(message.starts_with("No module named 'numpy': this runtime does not have it"), "{message}");
        assert!(!message.contains(EFFECTS_GO_THROUGH_TOOLS), "{message}");
        let dotted = refusal(OsFunctionCall::Import("http.client".into()));
        assert!(dotted.message().unwrap_or_default().contains(EFFECTS_GO_THROUGH_TOOLS));
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
