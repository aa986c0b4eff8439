//! Signal handling for runs that own namespaces: SIGINT, SIGTERM and SIGHUP set a flag instead
//! of ending the process, so the caller can delete its namespaces and stop its children first.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};

/// Set by the handler [`interrupt_flag`] installs.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that only set the returned flag (instead of
/// ending the process), so that a caller polling it can remove its namespaces and stop its child
/// processes before exiting. Installing twice is harmless.
///
/// # Errors
///
/// [`Error::Netns`] if `sigaction` fails.
pub fn interrupt_flag() -> Result<&'static std::sync::atomic::AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only performs
        // an atomic store, which is async-signal-safe.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::Netns { what: format!("sigaction({signal})"), source: std::io::Error::last_os_error() });
        }
    }
    Ok(&INTERRUPTED)
}
