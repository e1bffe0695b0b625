//! Buffer intake: Python objects UCX reads from or writes into, without copies.
//!
//! Host memory comes through the buffer protocol (bytes, bytearray, memoryview, NumPy...);
//! device memory through `__cuda_array_interface__` (CuPy, Numba, RMM...). The buffer-protocol
//! view, or a reference to the CUDA array, is held until UCX has let go of the memory.
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyMemoryView, PyTuple};
use ucx_core::{MemoryType, RecvBuffer, SendBuffer};

/// Memory of a Python object, pinned for the duration of an operation.
pub(crate) struct PyBuf {
    ptr: *mut u8,
    len: usize,
    memory_type: MemoryType,
    /// The buffer-protocol export (host memory); released when this is dropped.
    view: Option<Box<ffi::Py_buffer>>,
    /// The object itself (CUDA arrays hold no export, only this reference).
    _owner: Option<Py<PyAny>>,
    /// The CUDA stream the producer ordered its work on (CUDA Array Interface v3), to be
    /// synchronised before UCX reads or writes the memory.
    stream: Option<usize>,
}

// SAFETY: the pointer is into memory kept alive by `view`/`owner`, which may be released from
// any thread (see Drop); nothing here is tied to the thread that made it.
unsafe impl Send for PyBuf {}

impl PyBuf {
    /// Memory UCX may read: any contiguous buffer-protocol or CUDA-array object.
    pub(crate) fn readable(obj: &Bound<'_, PyAny>) -> PyResult<PyBuf> {
        PyBuf::take(obj, false)
    }

    /// Memory UCX may write: as [`PyBuf::readable`], and writable.
    pub(crate) fn writable(obj: &Bound<'_, PyAny>) -> PyResult<PyBufMut> {
        PyBuf::take(obj, true).map(PyBufMut)
    }

    fn take(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<PyBuf> {
        // CUDA first: an object with `__cuda_array_interface__` is device memory even if it
        // also offers the buffer protocol (CuPy 14's arrays do, and refuse it for device
        // memory). bytes, bytearray and memoryview never have one, so they skip the lookup.
        let plain = obj.is_exact_instance_of::<PyBytes>()
            || obj.is_exact_instance_of::<PyByteArray>()
            || obj.is_exact_instance_of::<PyMemoryView>();
        if !plain && may_have_cuda_interface(obj) {
            if let Ok(iface) = obj.getattr(pyo3::intern!(obj.py(), "__cuda_array_interface__")) {
                if !iface.is_none() {
                    return PyBuf::cuda(obj, &iface, writable);
                }
            }
        }
        // SAFETY: obj is a live object and we hold the GIL.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0 {
            return PyBuf::host(obj, writable);
        }
        Err(PyTypeError::new_err(format!(
            "expected an object with the buffer protocol or __cuda_array_interface__, got {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        )))
    }

    fn host(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<PyBuf> {
        // SAFETY: Py_buffer is plain C data that PyObject_GetBuffer fills in.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // Strides (for the contiguity check below) but no format: UCX needs only the bytes, and
        // NumPy builds a format string for every request that asks for one.
        // SAFETY: obj is live, the GIL is held, and view is valid for writing.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_STRIDES) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        let mut buf = PyBuf {
            ptr: view.buf.cast(),
            len: usize::try_from(view.len).unwrap_or(0),
            memory_type: MemoryType::Host,
            view: Some(view),
            _owner: None,
            stream: None,
        };
        let view = buf.view.as_deref_mut().map(|v| v as *mut ffi::Py_buffer);
        if let Some(v) = view {
            // SAFETY: v is the export filled in above, live until `buf` drops.
            let v = unsafe { &mut *v };
            if !v.suboffsets.is_null() {
                return Err(PyNotImplementedError::new_err("suboffsets are not supported"));
            }
            // SAFETY: as above.
            if unsafe { ffi::PyBuffer_IsContiguous(v, b'A' as std::ffi::c_char) } == 0 {
                return Err(PyValueError::new_err("Array must be C or F contiguous"));
            }
            if writable && v.readonly != 0 {
                return Err(PyValueError::new_err("writing to readonly buffer!"));
            }
        }
        Ok(buf)
    }

    fn cuda(obj: &Bound<'_, PyAny>, iface: &Bound<'_, PyAny>, writable: bool) -> PyResult<PyBuf> {
        let iface = iface.downcast::<PyDict>()?;
        let get = |k: &str| iface.get_item(k).ok().flatten();
        if get("mask").is_some_and(|m| !m.is_none()) {
            return Err(PyNotImplementedError::new_err("masked arrays are not supported"));
        }
        let stream = match get("stream").filter(|s| !s.is_none()) {
            None => None,
            Some(s) => match s.extract::<usize>() {
                // CAI v3: 0 is disallowed (ambiguous between the legacy and per-thread default).
                Ok(0) => {
                    return Err(PyValueError::new_err(
                        "__cuda_array_interface__ 'stream' is 0, which the CUDA Array Interface disallows",
                    ))
                }
                Ok(s) => Some(s),
                Err(_) => {
                    return Err(PyValueError::new_err("__cuda_array_interface__ 'stream' must be None or an int"))
                }
            },
        };
        let data = get("data").ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no 'data'"))?;
        let data = data.downcast::<PyTuple>()?;
        let ptr: usize = data.get_item(0)?.extract()?;
        let readonly: bool = data.get_item(1)?.extract()?;
        let shape: Vec<usize> =
            get("shape").ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no 'shape'"))?.extract()?;
        let typestr: String = get("typestr")
            .ok_or_else(|| PyValueError::new_err("__cuda_array_interface__ has no 'typestr'"))?
            .extract()?;
        let itemsize = itemsize(&typestr)?;
        let count: usize = shape.iter().product();
        if let Some(strides) = get("strides").filter(|s| !s.is_none()) {
            let strides: Vec<isize> = strides.extract()?;
            if strides.len() != shape.len() {
                return Err(PyValueError::new_err("strides must have one entry per dimension"));
            }
            if count > 1 && !contiguous(&shape, &strides, itemsize) {
                return Err(PyValueError::new_err("Array must be C or F contiguous"));
            }
        }
        if writable && readonly {
            return Err(PyValueError::new_err("writing to readonly buffer!"));
        }
        Ok(PyBuf {
            ptr: ptr as *mut u8,
            len: count * itemsize,
            memory_type: MemoryType::Cuda,
            view: None,
            _owner: Some(obj.clone().unbind()),
            stream,
        })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes device memory ready for UCX: refused when UCX has no CUDA transport (it would
    /// fail obscurely later), and the producer's stream synchronised (CUDA Array Interface v3
    /// asks a consumer to order its work after the producer's; UCX uses streams of its own).
    pub(crate) fn check_cuda(self, cuda_support: bool) -> PyResult<Self> {
        if self.memory_type == MemoryType::Cuda && !cuda_support {
            return Err(PyValueError::new_err(
                "UCX is not configured with CUDA support, please ensure that the CUDA transports (cuda_copy, \
                 cuda_ipc) are available and enabled in UCX_TLS",
            ));
        }
        // Zero bytes are never read or written, and their address may be no device memory at
        // all (CuPy's is 0), so there is nothing to wait for.
        if let (Some(stream), true) = (self.stream, self.len > 0) {
            crate::cuda_stream::synchronize(stream, self.ptr as usize)?;
        }
        Ok(self)
    }
}

/// A [`PyBuf`] checked writable at intake: what receives take.
pub(crate) struct PyBufMut(PyBuf);

impl PyBufMut {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.len
    }

    /// As [`PyBuf::check_cuda`].
    pub(crate) fn check_cuda(self, cuda_support: bool) -> PyResult<Self> {
        self.0.check_cuda(cuda_support).map(PyBufMut)
    }

    /// Its `len` bytes from `start` (a receive into one part of a larger buffer, the export
    /// still held whole); `None` where they do not lie inside it.
    pub(crate) fn narrow(mut self, start: usize, len: usize) -> Option<PyBufMut> {
        if start.checked_add(len)? > self.0.len {
            return None;
        }
        self.0.ptr = self.0.ptr.wrapping_add(start);
        self.0.len = len;
        Some(self)
    }
}

/// Whether `obj` can have `__cuda_array_interface__`: its type defines it, or its instances
/// carry a `__dict__` that might. Asked once per type (a failed attribute lookup raises and
/// clears an `AttributeError`, which cost NumPy arrays about 0.5 µs per transfer).
fn may_have_cuda_interface(obj: &Bound<'_, PyAny>) -> bool {
    /// Types seen so far (held, so a pointer is never reused for another type); a bounded
    /// number, as buffer types in a program are few.
    static SEEN: std::sync::Mutex<Vec<(Py<pyo3::types::PyType>, bool)>> = std::sync::Mutex::new(Vec::new());
    const MAX_SEEN: usize = 64;
    let ty = obj.get_type();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, may)) = seen.iter().find(|(t, _)| t.is(&ty)) {
        return *may;
    }
    let py = obj.py();
    let on_type = ty.hasattr(pyo3::intern!(py, "__cuda_array_interface__")).unwrap_or(true);
    let has_dict = ty
        .getattr(pyo3::intern!(py, "__dictoffset__"))
        .and_then(|d| d.extract::<isize>())
        .map_or(true, |offset| offset != 0);
    let may = on_type || has_dict;
    if seen.len() < MAX_SEEN {
        seen.push((ty.unbind(), may));
    }
    may
}

/// Item size of a `typestr` (`"<f4"`, `"|u1"`...): the digits after the kind character.
fn itemsize(typestr: &str) -> PyResult<usize> {
    typestr
        .get(2..)
        .and_then(|d| d.parse().ok())
        .filter(|n: &usize| *n > 0)
        .ok_or_else(|| PyValueError::new_err(format!("cannot tell the item size of typestr {typestr:?}")))
}

/// Whether `strides` describe a C- or Fortran-contiguous layout of `shape`.
fn contiguous(shape: &[usize], strides: &[isize], itemsize: usize) -> bool {
    let layout = |order: &mut dyn Iterator<Item = (usize, isize)>| {
        let mut expect = itemsize as isize;
        for (n, s) in order {
            if n != 1 && s != expect {
                return false;
            }
            expect *= n as isize;
        }
        true
    };
    let pairs: Vec<(usize, isize)> = shape.iter().copied().zip(strides.iter().copied()).collect();
    layout(&mut pairs.iter().rev().copied()) || layout(&mut pairs.iter().copied())
}

impl Drop for PyBuf {
    fn drop(&mut self) {
        if let Some(view) = self.view.take() {
            release_view(view);
        }
    }
}

/// Queues a buffer export for release by the next thread that drains with the GIL: an
/// export must be released with the GIL held, and this may run inside a UCX callback, which
/// must never wait for the GIL.
fn release_view(view: Box<ffi::Py_buffer>) {
    DEFERRED.lock().unwrap_or_else(|p| p.into_inner()).push(Deferred(view));
}

struct Deferred(Box<ffi::Py_buffer>);
// SAFETY: only moved between threads to be released under the GIL.
unsafe impl Send for Deferred {}

static DEFERRED: std::sync::Mutex<Vec<Deferred>> = std::sync::Mutex::new(Vec::new());

/// The most entries of room the queue keeps between releases (8 KiB of pointers).
const KEPT_ROOM: usize = 1024;

/// Releases the exports of finished operations (see `release_view`).
pub(crate) fn release_deferred(_py: Python<'_>) {
    let mut pending = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|p| p.into_inner()));
    if pending.is_empty() {
        return;
    }
    // Released outside the lock: a release may run Python (an exporter's release, a
    // collection) that drops another buffer, which queues here.
    for Deferred(mut view) in pending.drain(..) {
        // SAFETY: we hold the GIL (the token); each export is released exactly once.
        unsafe { ffi::PyBuffer_Release(&mut *view) };
    }
    // The emptied list goes back, so the next queued export does not allocate a new one (one
    // per message otherwise), unless exports were queued meanwhile or a burst grew it large.
    let mut queue = DEFERRED.lock().unwrap_or_else(|p| p.into_inner());
    if queue.capacity() == 0 && pending.capacity() <= KEPT_ROOM {
        *queue = pending;
    }
}

// SAFETY: ptr/len describe the object's memory (checked contiguous at intake), kept alive by
// the export or the owner reference until drop.
unsafe impl SendBuffer for PyBuf {
    fn as_ptr(&self) -> *const u8 {
        self.ptr
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn memory_type(&self) -> MemoryType {
        self.memory_type
    }
}

// SAFETY: delegates to PyBuf.
unsafe impl SendBuffer for PyBufMut {
    fn as_ptr(&self) -> *const u8 {
        self.0.ptr
    }
    fn byte_len(&self) -> usize {
        self.0.len
    }
    fn memory_type(&self) -> MemoryType {
        self.0.memory_type
    }
}

// SAFETY: constructed only through `PyBuf::writable`, which checked the export is not
// read-only; any byte pattern is valid for a byte buffer.
unsafe impl RecvBuffer for PyBufMut {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.ptr
    }
}
