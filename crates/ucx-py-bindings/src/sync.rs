//! Locking that tolerates poisoning: a panic on one thread (caught at the FFI boundary) must
//! not wedge the worker for every other thread.
use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data of a poisoned lock as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
