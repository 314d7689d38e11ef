//! A stdio server's exit status, kept as it is reaped.
//!
//! rmcp owns the server's child process and reaps it (when the connection
//! closes, or on drop), so the status cannot be waited for again here: the
//! [`RecordsExit`] wrapper sees it pass through the child's own `wait`
//! instead, and publishes it on a watch channel that the connection's error
//! messages read.

use crate::command::describe_exit;
use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};
use std::future::Future;
use std::io::Result;
use std::pin::Pin;
use std::process::ExitStatus;
use tokio::sync::watch;

/// A process-wrap layer that publishes the child's exit status, in words
/// ([`describe_exit`]), once whoever owns the child has waited for it.
#[derive(Debug)]
pub(crate) struct RecordsExit(pub(crate) watch::Sender<Option<String>>);

impl CommandWrapper for RecordsExit {
    fn wrap_child(&mut self, child: Box<dyn ChildWrapper>, _core: &CommandWrap) -> Result<Box<dyn ChildWrapper>> {
        Ok(Box::new(RecordingChild { inner: child, exit: self.0.clone() }))
    }
}

#[derive(Debug)]
struct RecordingChild {
    inner: Box<dyn ChildWrapper>,
    exit: watch::Sender<Option<String>>,
}

impl RecordingChild {
    fn note(&self, status: ExitStatus) {
        self.exit.send_if_modified(|exit| exit.replace(describe_exit(status)).is_none());
    }
}

impl ChildWrapper for RecordingChild {
    fn inner(&self) -> &dyn ChildWrapper {
        &*self.inner
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        &mut *self.inner
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.inner
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let status = self.inner.try_wait()?;
        if let Some(status) = status {
            self.note(status);
        }
        Ok(status)
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            let status = self.inner.wait().await?;
            self.note(status);
            Ok(status)
        })
    }
}
