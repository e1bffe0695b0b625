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
//!
//! The driver needs a current context on the calling thread, and the default-stream handles
//! mean "of the current context". The thread that sends is often not the one that made the
//! array (an event loop in its own thread, Dask's comm beside its compute threads), and may
//! never have touched CUDA (seen on an H200: `invalid device context`). So for a default
//! stream the memory's own context is made current for the wait (and put back after), and an
//! explicit stream handle that the driver refuses for want of a context gets the same.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

type Context = *mut c_void;
type StreamSynchronize = unsafe extern "C" fn(stream: *mut c_void) -> c_int;
type GetErrorString = unsafe extern "C" fn(error: c_int, text: *mut *const c_char) -> c_int;
type CtxGetCurrent = unsafe extern "C" fn(ctx: *mut Context) -> c_int;
type CtxPushCurrent = unsafe extern "C" fn(ctx: Context) -> c_int;
type CtxPopCurrent = unsafe extern "C" fn(ctx: *mut Context) -> c_int;
type PointerGetAttribute = unsafe extern "C" fn(data: *mut c_void, attribute: c_int, ptr: u64) -> c_int;
type PrimaryCtxRetain = unsafe extern "C" fn(ctx: *mut Context, device: c_int) -> c_int;
type PrimaryCtxRelease = unsafe extern "C" fn(device: c_int) -> c_int;

/// The driver entry points this module uses (cuda.h; the `_v2` names are those the headers
/// map the plain names to).
struct Driver {
    synchronize: StreamSynchronize,
    error_string: Option<GetErrorString>,
    ctx_get_current: CtxGetCurrent,
    ctx_push_current: CtxPushCurrent,
    ctx_pop_current: CtxPopCurrent,
    pointer_get_attribute: PointerGetAttribute,
    primary_ctx_retain: PrimaryCtxRetain,
    primary_ctx_release: PrimaryCtxRelease,
}

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;
const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_INVALID_CONTEXT: c_int = 201;
const CU_POINTER_ATTRIBUTE_CONTEXT: c_int = 1;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: the current context's default streams.
const DEFAULT_STREAMS: [usize; 2] = [1, 2];

/// The CUDA driver's entry points, loaded once (`None`: no driver on this machine).
fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: dlopen/dlsym are called with NUL-terminated names; the library is never
            // closed, so the function pointers stay valid for the process's life, and each is
            // transmuted to the signature cuda.h gives that entry point.
            unsafe {
                let lib = dlopen(c"libcuda.so.1".as_ptr(), RTLD_NOW);
                if lib.is_null() {
                    return None;
                }
                let sym = |name: &CStr| {
                    let f = dlsym(lib, name.as_ptr());
                    (!f.is_null()).then_some(f)
                };
                Some(Driver {
                    synchronize: std::mem::transmute::<*mut c_void, StreamSynchronize>(sym(c"cuStreamSynchronize")?),
                    error_string: sym(c"cuGetErrorString")
                        .map(|f| std::mem::transmute::<*mut c_void, GetErrorString>(f)),
                    ctx_get_current: std::mem::transmute::<*mut c_void, CtxGetCurrent>(sym(c"cuCtxGetCurrent")?),
                    ctx_push_current: std::mem::transmute::<*mut c_void, CtxPushCurrent>(sym(c"cuCtxPushCurrent_v2")?),
                    ctx_pop_current: std::mem::transmute::<*mut c_void, CtxPopCurrent>(sym(c"cuCtxPopCurrent_v2")?),
                    pointer_get_attribute: std::mem::transmute::<*mut c_void, PointerGetAttribute>(sym(
                        c"cuPointerGetAttribute",
                    )?),
                    primary_ctx_retain: std::mem::transmute::<*mut c_void, PrimaryCtxRetain>(sym(
                        c"cuDevicePrimaryCtxRetain",
                    )?),
                    primary_ctx_release: std::mem::transmute::<*mut c_void, PrimaryCtxRelease>(sym(
                        c"cuDevicePrimaryCtxRelease_v2",
                    )?),
                })
            }
        })
        .as_ref()
}

/// A context made current for one wait, and undone on drop: pushed (and popped), and for
/// memory that names only its device, that device's primary context retained (and released).
struct ContextScope<'d> {
    driver: &'d Driver,
    pushed: bool,
    retained_device: Option<c_int>,
}

impl Drop for ContextScope<'_> {
    fn drop(&mut self) {
        // SAFETY: pops only what `memory_context` pushed on this thread, and releases only the
        // primary context it retained; the out-pointer is a local.
        unsafe {
            if self.pushed {
                let mut popped: Context = std::ptr::null_mut();
                (self.driver.ctx_pop_current)(&mut popped);
            }
            if let Some(device) = self.retained_device {
                (self.driver.primary_ctx_release)(device);
            }
        }
    }
}

/// Makes the context that owns device address `ptr` current on this thread until the scope is
/// dropped; nothing is pushed when it already is current, or when the driver cannot tell.
fn memory_context(driver: &Driver, ptr: usize) -> ContextScope<'_> {
    let mut scope = ContextScope { driver, pushed: false, retained_device: None };
    let mut ctx: Context = std::ptr::null_mut();
    let mut current: Context = std::ptr::null_mut();
    // SAFETY: out-pointers are locals of the attribute's type (CUcontext, int); the driver
    // validates `ptr` and returns an error for an address it does not know.
    unsafe {
        let rc =
            (driver.pointer_get_attribute)((&mut ctx as *mut Context).cast(), CU_POINTER_ATTRIBUTE_CONTEXT, ptr as u64);
        if rc != CUDA_SUCCESS || ctx.is_null() {
            // Memory mapped with the virtual-memory API (pools among them) names its device only.
            let mut device: c_int = -1;
            let rc = (driver.pointer_get_attribute)(
                (&mut device as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr as u64,
            );
            if rc != CUDA_SUCCESS || (driver.primary_ctx_retain)(&mut ctx, device) != CUDA_SUCCESS {
                return scope;
            }
            scope.retained_device = Some(device);
        }
        if (driver.ctx_get_current)(&mut current) == CUDA_SUCCESS && current == ctx {
            return scope;
        }
        scope.pushed = (driver.ctx_push_current)(ctx) == CUDA_SUCCESS;
    }
    scope
}

/// Waits until the work queued on `stream` (a CAI v3 `stream` value, not 0) has finished; `ptr`
/// is the array's device address, which says whose context a default stream belongs to.
pub(crate) fn synchronize(stream: usize, ptr: usize) -> PyResult<()> {
    let Some(driver) = driver() else {
        return Err(PyRuntimeError::new_err(format!(
            "cannot synchronise the array's CUDA stream {stream:#x}: the CUDA driver (libcuda.so.1) is not available"
        )));
    };
    let wait = || {
        // SAFETY: the handle is the producer's stream (or a default-stream constant), which the
        // producer keeps alive while its array is in use; the driver checks it.
        unsafe { (driver.synchronize)(stream as *mut c_void) }
    };
    let default_stream = DEFAULT_STREAMS.contains(&stream);
    let mut rc = if default_stream {
        let _scope = memory_context(driver, ptr);
        wait()
    } else {
        wait()
    };
    if rc == CUDA_ERROR_INVALID_CONTEXT && !default_stream {
        let _scope = memory_context(driver, ptr);
        rc = wait();
    }
    if rc == CUDA_SUCCESS {
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
