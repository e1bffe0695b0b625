//! CUDA device buffers (feature `cuda`): `cust` buffers as [`crate::SendBuffer`] /
//! [`crate::RecvBuffer`] with `UCS_MEMORY_TYPE_CUDA`.
