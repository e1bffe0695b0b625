//! Remote memory access from Python: `MemoryHandle` (memory registered with UCX, allocated by
//! it or a Python buffer it keeps alive), `RemoteKey` (a peer's packed key unpacked on an
//! endpoint). The one-sided `put`/`get` are `Endpoint` methods.
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::buffer::{PyBuf, PyBufMut};
use crate::context::Context;
use crate::errors;

/// The Python object whose memory a handle maps, kept alive as long as the handle (held
/// only to be dropped, hence never read).
#[allow(dead_code)]
enum Mapped {
    Writable(Box<PyBufMut>),
    ReadOnly(Box<PyBuf>),
}

/// Holds a [`Mapped`] that nothing reads again; it is only dropped.
#[allow(dead_code)]
struct KeepAlive(Mapped);

// SAFETY: the buffer is never accessed through a shared reference after mapping (no method
// reads it); it is only dropped, by whoever drops the handle.
unsafe impl Sync for KeepAlive {}

/// Memory registered with UCX (`ucp_mem_h`).
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct MemoryHandle {
    // Declared first so it is dropped (unmapped) before the buffer it maps.
    handle: ucx_core::MemoryHandle<'static>,
    _mapped: Option<KeepAlive>,
}

#[pymethods]
impl MemoryHandle {
    /// Has UCX allocate and register `size` bytes of host memory.
    #[staticmethod]
    fn alloc(py: Python<'_>, context: &Context, size: usize) -> PyResult<MemoryHandle> {
        let handle = ucx_core::MemoryHandle::allocate(&context.inner, size).map_err(|e| errors::from_core(py, &e))?;
        Ok(MemoryHandle { handle, _mapped: None })
    }

    /// Registers `buffer`'s memory (writable buffers for remote reads and writes, read-only
    /// ones for remote reads).
    #[staticmethod]
    fn map(py: Python<'_>, context: &Context, buffer: &Bound<'_, PyAny>) -> PyResult<MemoryHandle> {
        if let Ok(buf) = PyBuf::writable(buffer) {
            let mut boxed = Box::new(buf);
            let handle =
                ucx_core::MemoryHandle::map(&context.inner, &mut *boxed).map_err(|e| errors::from_core(py, &e))?;
            // SAFETY: the mapping borrows the boxed buffer, whose memory stays put and alive
            // for as long as this value: `handle` is dropped before `_mapped` (field order).
            let handle =
                unsafe { std::mem::transmute::<ucx_core::MemoryHandle<'_>, ucx_core::MemoryHandle<'static>>(handle) };
            return Ok(MemoryHandle { handle, _mapped: Some(KeepAlive(Mapped::Writable(boxed))) });
        }
        let boxed = Box::new(PyBuf::readable(buffer)?);
        let handle =
            ucx_core::MemoryHandle::map_readonly(&context.inner, &*boxed).map_err(|e| errors::from_core(py, &e))?;
        // SAFETY: as above.
        let handle =
            unsafe { std::mem::transmute::<ucx_core::MemoryHandle<'_>, ucx_core::MemoryHandle<'static>>(handle) };
        Ok(MemoryHandle { handle, _mapped: Some(KeepAlive(Mapped::ReadOnly(boxed))) })
    }

    /// The registered memory's address.
    #[getter]
    fn address(&self) -> u64 {
        self.handle.address()
    }

    /// Its length in bytes.
    #[getter]
    fn length(&self) -> usize {
        self.handle.len()
    }

    /// The packed remote key a peer unpacks to reach this memory.
    fn pack_rkey<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let packed = self.handle.pack_rkey().map_err(|e| errors::from_core(py, &e))?;
        Ok(PyBytes::new(py, &packed))
    }
}

/// A peer's remote key, unpacked on one endpoint (`ucp_rkey_h`).
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct RemoteKey {
    pub(crate) inner: Arc<ucx_core::RemoteKey>,
}
