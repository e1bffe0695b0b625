//! Buffers UCX reads from and writes into, typed by where their memory lives.
//!
//! The memory type is part of the buffer's type, and it is passed to UCX with every operation,
//! so UCX never has to detect it (detection costs a lookup per operation and can be wrong for
//! memory it has not seen). Host memory: byte and plain-old-data slices, `Vec`s, arrays. CUDA
//! device memory: `cust` buffers with feature `cuda` (see `cuda` module).
use crate::sys;

/// Where a buffer's memory lives (`ucs_memory_type_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryType {
    /// Ordinary host memory.
    Host,
    /// CUDA device memory.
    Cuda,
    /// CUDA managed (unified) memory.
    CudaManaged,
    /// ROCm device memory.
    Rocm,
    /// ROCm managed memory.
    RocmManaged,
    /// Memory UCX does not know yet; UCX detects it.
    Unknown,
}

impl MemoryType {
    /// The raw `ucs_memory_type_t`.
    pub fn raw(self) -> sys::ucs_memory_type_t {
        match self {
            MemoryType::Host => sys::UCS_MEMORY_TYPE_HOST,
            MemoryType::Cuda => sys::UCS_MEMORY_TYPE_CUDA,
            MemoryType::CudaManaged => sys::UCS_MEMORY_TYPE_CUDA_MANAGED,
            MemoryType::Rocm => sys::UCS_MEMORY_TYPE_ROCM,
            MemoryType::RocmManaged => sys::UCS_MEMORY_TYPE_ROCM_MANAGED,
            MemoryType::Unknown => sys::UCS_MEMORY_TYPE_UNKNOWN,
        }
    }

    /// From a raw value (e.g. UCX-Py's 4-byte AM header); values without a variant map to
    /// [`MemoryType::Unknown`].
    pub fn from_raw(raw: u32) -> MemoryType {
        match raw {
            sys::UCS_MEMORY_TYPE_HOST => MemoryType::Host,
            sys::UCS_MEMORY_TYPE_CUDA => MemoryType::Cuda,
            sys::UCS_MEMORY_TYPE_CUDA_MANAGED => MemoryType::CudaManaged,
            sys::UCS_MEMORY_TYPE_ROCM => MemoryType::Rocm,
            sys::UCS_MEMORY_TYPE_ROCM_MANAGED => MemoryType::RocmManaged,
            _ => MemoryType::Unknown,
        }
    }

    /// Whether this is a GPU's memory (CUDA or ROCm, managed included).
    pub fn is_device(self) -> bool {
        matches!(self, MemoryType::Cuda | MemoryType::CudaManaged | MemoryType::Rocm | MemoryType::RocmManaged)
    }

    /// The value passed to UCX as an operation's memory type (`None`: let UCX detect it).
    pub(crate) fn for_op(self) -> Option<sys::ucs_memory_type_t> {
        (self != MemoryType::Unknown).then(|| self.raw())
    }
}

/// Memory UCX may read for the duration of an operation.
///
/// # Safety
/// `as_ptr()` must point to `byte_len()` readable bytes of memory of type `memory_type()`,
/// valid for as long as the value is borrowed.
pub unsafe trait SendBuffer {
    /// Start of the memory.
    fn as_ptr(&self) -> *const u8;
    /// Length in bytes.
    fn byte_len(&self) -> usize;
    /// Where the memory lives.
    fn memory_type(&self) -> MemoryType;
}

/// Memory UCX may write for the duration of an operation.
///
/// # Safety
/// As [`SendBuffer`], and `as_mut_ptr()` must point to `byte_len()` writable bytes that any
/// byte pattern is a valid value for.
pub unsafe trait RecvBuffer: SendBuffer {
    /// Start of the memory, writable.
    fn as_mut_ptr(&mut self) -> *mut u8;
}

/// Plain-old-data element types: every byte pattern is a valid value and there is no padding,
/// so a slice of them may be sent as bytes and received into.
///
/// # Safety
/// Implement only for types without padding or invalid bit patterns.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive numeric types have no padding and no invalid bit patterns.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

// SAFETY: a slice of Pod points to len * size_of::<T>() initialised host bytes.
unsafe impl<T: Pod> SendBuffer for [T] {
    fn as_ptr(&self) -> *const u8 {
        <[T]>::as_ptr(self).cast()
    }
    fn byte_len(&self) -> usize {
        std::mem::size_of_val(self)
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Host
    }
}

// SAFETY: as for SendBuffer; any byte pattern is a valid Pod value.
unsafe impl<T: Pod> RecvBuffer for [T] {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        <[T]>::as_mut_ptr(self).cast()
    }
}

// SAFETY: delegates to the slice impl.
unsafe impl<T: Pod> SendBuffer for Vec<T> {
    fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr().cast()
    }
    fn byte_len(&self) -> usize {
        std::mem::size_of_val(self.as_slice())
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Host
    }
}

// SAFETY: delegates to the slice impl.
unsafe impl<T: Pod> RecvBuffer for Vec<T> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_slice().as_mut_ptr().cast()
    }
}

// SAFETY: delegates to the slice impl.
unsafe impl<T: Pod, const N: usize> SendBuffer for [T; N] {
    fn as_ptr(&self) -> *const u8 {
        self.as_slice().as_ptr().cast()
    }
    fn byte_len(&self) -> usize {
        std::mem::size_of::<[T; N]>()
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Host
    }
}

// SAFETY: delegates to the slice impl.
unsafe impl<T: Pod, const N: usize> RecvBuffer for [T; N] {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_mut_slice().as_mut_ptr().cast()
    }
}

/// `SendBuffer` for `bytes` types that deref to their initialised host bytes.
#[cfg(feature = "bytes")]
macro_rules! host_bytes {
    ($($t:ty),*) => { $(
        // SAFETY: the value derefs to its initialised host bytes (`len()`, not spare
        // capacity), which do not move or change while it is borrowed or owned by the
        // operation.
        unsafe impl SendBuffer for $t {
            fn as_ptr(&self) -> *const u8 {
                <[u8]>::as_ptr(self)
            }
            fn byte_len(&self) -> usize {
                self.len()
            }
            fn memory_type(&self) -> MemoryType {
                MemoryType::Host
            }
        }
    )* };
}
#[cfg(feature = "bytes")]
host_bytes!(bytes::Bytes, bytes::BytesMut);

// SAFETY: a `BytesMut` is exclusively owned, so its initialised bytes are writable; any byte
// pattern is a valid u8.
#[cfg(feature = "bytes")]
unsafe impl RecvBuffer for bytes::BytesMut {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        <[u8]>::as_mut_ptr(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers_report_bytes_and_host() {
        let v = vec![0u32; 10];
        assert_eq!(v.byte_len(), 40);
        assert_eq!(SendBuffer::memory_type(&v), MemoryType::Host);
        let a = [0f64; 3];
        assert_eq!(a.byte_len(), 24);
        assert_eq!(v[..4].byte_len(), 16);
        assert_eq!(MemoryType::from_raw(1), MemoryType::Cuda);
        assert_eq!(MemoryType::from_raw(77), MemoryType::Unknown);
    }
}
