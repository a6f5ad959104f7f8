//! SIGTERM and SIGINT end the process at once with exit code 0.
//!
//! std has no signal API and the crate has no dependencies, so the two libc functions
//! needed are declared here. The handler only calls `_exit`, which is async-signal-safe.
//! Installing a handler also matters for SIGINT: a process started in the background by a
//! non-interactive shell inherits SIGINT *ignored*, and would otherwise not stop on it.

/// Makes SIGTERM and SIGINT exit the process with code 0 (a no-op off Unix).
pub fn install() {
    #[cfg(unix)]
    unix::install();
}

#[cfg(unix)]
mod unix {
    use std::os::raw::c_int;

    // The same numbers on Linux, the BSDs and macOS.
    const SIGINT: c_int = 2;
    const SIGTERM: c_int = 15;
    /// `SIG_ERR`: `(sighandler_t) -1`.
    const SIG_ERR: usize = usize::MAX;

    extern "C" {
        fn signal(signum: c_int, handler: usize) -> usize;
        fn _exit(status: c_int) -> !;
    }

    extern "C" fn on_signal(_signum: c_int) {
        // SAFETY: `_exit` is async-signal-safe and takes no pointers.
        unsafe { _exit(0) }
    }

    pub fn install() {
        let handler = on_signal as extern "C" fn(c_int) as usize;
        for (signum, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
            // SAFETY: `signal` is given a valid signal number and a handler with the C
            // signature `void (*)(int)` that only calls an async-signal-safe function.
            if unsafe { signal(signum, handler) } == SIG_ERR {
                eprintln!("demo-service: cannot install the {name} handler; it keeps its default");
            }
        }
    }
}
