//! The exceptions the package raises (`tether.TetherError` and its kinds),
//! and the one mapping from Rust errors to them.

use pyo3::PyErr;
use pyo3::create_exception;
use pyo3::exceptions::PyException;

create_exception!(
    _native,
    TetherError,
    PyException,
    "Every error Tether raises (a refused or failed call is a result, never this)."
);
create_exception!(
    _native,
    ConfigError,
    TetherError,
    "The turn cannot be built as described (a tool, a limit, a schema)."
);
create_exception!(_native, SidecarUnavailable, TetherError, "No sidecar could be started or reached to run scripts.");
create_exception!(_native, AuditStoreError, TetherError, "The audit store cannot be opened or read.");
create_exception!(
    _native,
    NotWaiting,
    TetherError,
    "Nothing of the turn waits for an answer in the audit store, or not the call named (`tether.answer`)."
);
create_exception!(
    _native,
    RunClaimed,
    TetherError,
    "Another process is resuming the parked run (`tether.answer`); `take_over=True` resumes it once that process is gone."
);
create_exception!(
    _native,
    ResumeInterrupted,
    TetherError,
    "A resumed run did not reach its end (its sidecar went away or refused it): it is parked again with every answer; answer again to resume it."
);

/// A Rust error as the exception of its kind.
pub(crate) fn config(error: impl std::fmt::Display) -> PyErr {
    ConfigError::new_err(error.to_string())
}

/// A sidecar error as [`SidecarUnavailable`].
pub(crate) fn sidecar(error: impl std::fmt::Display) -> PyErr {
    SidecarUnavailable::new_err(error.to_string())
}

/// A store error as [`AuditStoreError`].
pub(crate) fn store(error: impl std::fmt::Display) -> PyErr {
    AuditStoreError::new_err(error.to_string())
}

/// Why nothing can be answered as asked, as [`NotWaiting`].
pub(crate) fn not_waiting(message: impl std::fmt::Display) -> PyErr {
    NotWaiting::new_err(message.to_string())
}
