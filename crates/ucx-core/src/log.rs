//! UCX's own reason for a failure. UCX logs why a call failed ("transport 'bogus' is not
//! available, please use one or more of: ...") and returns only a status, and its log goes to a
//! buffered stdout that a failing process may never flush. [`capture`] runs a call with a log
//! handler that keeps this thread's warnings and errors, so the [`Error`](crate::Error) can
//! carry them. UCX's own output is unchanged (the handler passes every message on).
//!
//! Only on x86_64, where bindgen hands a `va_list` argument over as `*mut __va_list_tag`;
//! elsewhere [`capture`] runs the call and keeps nothing.
use std::cell::RefCell;
use std::ffi::{c_char, c_uint, CStr};
use std::sync::Mutex;

use crate::sys;

thread_local! {
    /// Messages kept while this thread runs a [`capture`]; `None` outside one.
    static KEPT: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// UCX's handler list is one stack for the process: captures take turns, so each pops the
/// handler it pushed.
static TURN: Mutex<()> = Mutex::new(());

/// The longest message kept (UCX's own default buffer is 1 KiB).
const MAX_MESSAGE: usize = 1024;

/// Runs `call`, returning its result and the warnings and errors UCX logged on this thread
/// meanwhile, oldest first.
#[cfg(target_arch = "x86_64")]
pub(crate) fn capture<T>(call: impl FnOnce() -> T) -> (T, Vec<String>) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    KEPT.with(|k| *k.borrow_mut() = Some(Vec::new()));
    // SAFETY: `keep` has the signature UCX calls handlers with and is valid for the whole
    // process; it is popped below, under the same turn.
    unsafe { sys::ucs_log_push_handler(Some(keep)) };
    let out = call();
    // SAFETY: pops the handler pushed above (the turn keeps other captures from pushing).
    unsafe { sys::ucs_log_pop_handler() };
    let kept = KEPT.with(|k| k.borrow_mut().take()).unwrap_or_default();
    (out, kept)
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn capture<T>(call: impl FnOnce() -> T) -> (T, Vec<String>) {
    (call(), Vec::new())
}

/// The handler: formats warnings and errors of the capturing thread into its list, then lets
/// UCX's next handler print the message as usual. Never unwinds (no panic crosses into C).
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn keep(
    _file: *const c_char,
    _line: c_uint,
    _function: *const c_char,
    level: sys::ucs_log_level_t,
    _comp_conf: *const sys::ucs_log_component_config_t,
    message: *const c_char,
    ap: *mut sys::__va_list_tag,
) -> sys::ucs_log_func_rc_t {
    let capturing = KEPT.with(|k| k.try_borrow().map(|k| k.is_some()).unwrap_or(false));
    if capturing && level <= sys::UCS_LOG_LEVEL_WARN && !message.is_null() {
        let mut buf = [0u8; MAX_MESSAGE];
        // SAFETY: `message` and `ap` are the format and arguments UCX passes to every handler
        // (it starts `ap` afresh for each); vsnprintf writes at most `buf.len()` bytes,
        // NUL-terminated.
        let n = unsafe { sys::vsnprintf(buf.as_mut_ptr().cast(), buf.len() as _, message, ap) };
        if n >= 0 {
            if let Ok(text) = CStr::from_bytes_until_nul(&buf) {
                let text = text.to_string_lossy().into_owned();
                KEPT.with(|k| {
                    if let Ok(mut k) = k.try_borrow_mut() {
                        if let Some(kept) = k.as_mut() {
                            kept.push(text);
                        }
                    }
                });
            }
        }
    }
    sys::UCS_LOG_FUNC_RC_CONTINUE
}
