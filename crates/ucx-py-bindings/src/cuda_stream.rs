//! Synchronising a CUDA Array Interface producer's stream before UCX touches the memory.
//!
//! CAI v3: when an array's `stream` is not None, the producer may still have work queued on
//! that stream, and a consumer must order its own work after it. UCX copies with streams of its
//! own, so the simplest correct order is to wait for the producer's stream
//! (`cuStreamSynchronize`) before handing the pointer to UCX. The extension is built without
//! CUDA (it must build and import on machines without it), so the driver is opened at run time
//! the first time a stream needs synchronising; `1` and `2` are the legacy and per-thread
//! default streams, which the driver API accepts as the handles `CU_STREAM_LEGACY` and
//! `CU_STREAM_PER_THREAD`.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

type StreamSynchronize = unsafe extern "C" fn(stream: *mut c_void) -> c_int;
type GetErrorString = unsafe extern "C" fn(error: c_int, text: *mut *const c_char) -> c_int;

struct Driver {
    synchronize: StreamSynchronize,
    error_string: Option<GetErrorString>,
}

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;

/// The CUDA driver's entry points, loaded once (`None`: no driver on this machine).
fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: dlopen/dlsym are called with NUL-terminated names; the library is never
            // closed, so the function pointers stay valid for the process's life, and their
            // signatures are those of the CUDA driver API (cuda.h).
            unsafe {
                let lib = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
                if lib.is_null() {
                    return None;
                }
                let sync = dlsym(lib, c"cuStreamSynchronize".as_ptr());
                if sync.is_null() {
                    return None;
                }
                let text = dlsym(lib, c"cuGetErrorString".as_ptr());
                Some(Driver {
                    synchronize: std::mem::transmute::<*mut c_void, StreamSynchronize>(sync),
                    error_string: (!text.is_null()).then(|| std::mem::transmute::<*mut c_void, GetErrorString>(text)),
                })
            }
        })
        .as_ref()
}

/// Waits until the work queued on `stream` (a CAI v3 `stream` value, not 0) has finished.
pub(crate) fn synchronize(stream: usize) -> PyResult<()> {
    let Some(driver) = driver() else {
        return Err(PyRuntimeError::new_err(format!(
            "cannot synchronise the array's CUDA stream {stream:#x}: the CUDA driver (libcuda.so.1) is not available"
        )));
    };
    // SAFETY: the pointer is the producer's stream handle (or a default-stream constant), which
    // the producer keeps alive while its array is in use; the driver checks it.
    let rc = unsafe { (driver.synchronize)(stream as *mut c_void) };
    if rc == 0 {
        return Ok(());
    }
    let mut text: *const c_char = std::ptr::null();
    if let Some(error_string) = driver.error_string {
        // SAFETY: cuGetErrorString writes a pointer to a static string (or leaves it null).
        unsafe { error_string(rc, &mut text) };
    }
    let what = if text.is_null() {
        format!("CUDA error {rc}")
    } else {
        // SAFETY: a non-null result is a static NUL-terminated string owned by the driver.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    };
    Err(PyRuntimeError::new_err(format!("synchronising the array's CUDA stream {stream:#x} failed: {what}")))
}
