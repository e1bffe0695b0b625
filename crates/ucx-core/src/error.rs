//! Errors: one enum over UCX's `ucs_status_t`, and an [`Error`] that names the operation that
//! failed, so a message reads like `ucp_tag_recv_nbx: Message truncated`.
use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// A UCX status other than `UCS_OK` / `UCS_INPROGRESS`, named after UCX's `UCS_ERR_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// `UCS_ERR_NO_MESSAGE`: no pending message.
    NoMessage,
    /// `UCS_ERR_NO_RESOURCE`: out of resources (try again after progress).
    NoResource,
    /// `UCS_ERR_IO_ERROR`: input/output error.
    IoError,
    /// `UCS_ERR_NO_MEMORY`: out of memory.
    NoMemory,
    /// `UCS_ERR_INVALID_PARAM`: an argument was invalid (e.g. a bad configuration value).
    InvalidParam,
    /// `UCS_ERR_UNREACHABLE`: the destination is unreachable.
    Unreachable,
    /// `UCS_ERR_INVALID_ADDR`: an address was invalid.
    InvalidAddr,
    /// `UCS_ERR_NOT_IMPLEMENTED`.
    NotImplemented,
    /// `UCS_ERR_MESSAGE_TRUNCATED`: the message was larger than the receive buffer.
    MessageTruncated,
    /// `UCS_ERR_NO_PROGRESS`.
    NoProgress,
    /// `UCS_ERR_BUFFER_TOO_SMALL`.
    BufferTooSmall,
    /// `UCS_ERR_NO_ELEM`: no such element (e.g. an unknown configuration name).
    NoElem,
    /// `UCS_ERR_SOME_CONNECTS_FAILED`.
    SomeConnectsFailed,
    /// `UCS_ERR_NO_DEVICE`: no such device.
    NoDevice,
    /// `UCS_ERR_BUSY`: busy (e.g. `ucp_worker_arm` with events pending).
    Busy,
    /// `UCS_ERR_CANCELED`: the operation was canceled.
    Canceled,
    /// `UCS_ERR_SHMEM_SEGMENT`.
    ShmemSegment,
    /// `UCS_ERR_ALREADY_EXISTS`: e.g. the listener's port is taken.
    AlreadyExists,
    /// `UCS_ERR_OUT_OF_RANGE`.
    OutOfRange,
    /// `UCS_ERR_TIMED_OUT`.
    TimedOut,
    /// `UCS_ERR_EXCEEDS_LIMIT`.
    ExceedsLimit,
    /// `UCS_ERR_UNSUPPORTED`.
    Unsupported,
    /// `UCS_ERR_REJECTED`: the server rejected the connection.
    Rejected,
    /// `UCS_ERR_NOT_CONNECTED`.
    NotConnected,
    /// `UCS_ERR_CONNECTION_RESET`: the peer went away.
    ConnectionReset,
    /// `UCS_ERR_ENDPOINT_TIMEOUT`: the peer stopped answering (keepalive).
    EndpointTimeout,
    /// A link or endpoint failure code without a name of its own, or a newer status.
    Other(i8),
}

impl Status {
    /// Maps a raw status; `None` for `UCS_OK` and `UCS_INPROGRESS` (not errors).
    pub(crate) fn from_raw(raw: sys::ucs_status_t) -> Option<Status> {
        use Status::*;
        Some(match raw {
            sys::UCS_OK | sys::UCS_INPROGRESS => return None,
            sys::UCS_ERR_NO_MESSAGE => NoMessage,
            sys::UCS_ERR_NO_RESOURCE => NoResource,
            sys::UCS_ERR_IO_ERROR => IoError,
            sys::UCS_ERR_NO_MEMORY => NoMemory,
            sys::UCS_ERR_INVALID_PARAM => InvalidParam,
            sys::UCS_ERR_UNREACHABLE => Unreachable,
            sys::UCS_ERR_INVALID_ADDR => InvalidAddr,
            sys::UCS_ERR_NOT_IMPLEMENTED => NotImplemented,
            sys::UCS_ERR_MESSAGE_TRUNCATED => MessageTruncated,
            sys::UCS_ERR_NO_PROGRESS => NoProgress,
            sys::UCS_ERR_BUFFER_TOO_SMALL => BufferTooSmall,
            sys::UCS_ERR_NO_ELEM => NoElem,
            sys::UCS_ERR_SOME_CONNECTS_FAILED => SomeConnectsFailed,
            sys::UCS_ERR_NO_DEVICE => NoDevice,
            sys::UCS_ERR_BUSY => Busy,
            sys::UCS_ERR_CANCELED => Canceled,
            sys::UCS_ERR_SHMEM_SEGMENT => ShmemSegment,
            sys::UCS_ERR_ALREADY_EXISTS => AlreadyExists,
            sys::UCS_ERR_OUT_OF_RANGE => OutOfRange,
            sys::UCS_ERR_TIMED_OUT => TimedOut,
            sys::UCS_ERR_EXCEEDS_LIMIT => ExceedsLimit,
            sys::UCS_ERR_UNSUPPORTED => Unsupported,
            sys::UCS_ERR_REJECTED => Rejected,
            sys::UCS_ERR_NOT_CONNECTED => NotConnected,
            sys::UCS_ERR_CONNECTION_RESET => ConnectionReset,
            sys::UCS_ERR_ENDPOINT_TIMEOUT => EndpointTimeout,
            other => Other(other),
        })
    }

    /// The status for a raw `ucs_status_t` error code (as [`Status::raw`] returns); `None` for
    /// `UCS_OK` and `UCS_INPROGRESS`.
    pub fn from_code(raw: i8) -> Option<Status> {
        Status::from_raw(raw)
    }

    /// The raw `ucs_status_t`.
    pub fn raw(self) -> i8 {
        use Status::*;
        match self {
            NoMessage => sys::UCS_ERR_NO_MESSAGE,
            NoResource => sys::UCS_ERR_NO_RESOURCE,
            IoError => sys::UCS_ERR_IO_ERROR,
            NoMemory => sys::UCS_ERR_NO_MEMORY,
            InvalidParam => sys::UCS_ERR_INVALID_PARAM,
            Unreachable => sys::UCS_ERR_UNREACHABLE,
            InvalidAddr => sys::UCS_ERR_INVALID_ADDR,
            NotImplemented => sys::UCS_ERR_NOT_IMPLEMENTED,
            MessageTruncated => sys::UCS_ERR_MESSAGE_TRUNCATED,
            NoProgress => sys::UCS_ERR_NO_PROGRESS,
            BufferTooSmall => sys::UCS_ERR_BUFFER_TOO_SMALL,
            NoElem => sys::UCS_ERR_NO_ELEM,
            SomeConnectsFailed => sys::UCS_ERR_SOME_CONNECTS_FAILED,
            NoDevice => sys::UCS_ERR_NO_DEVICE,
            Busy => sys::UCS_ERR_BUSY,
            Canceled => sys::UCS_ERR_CANCELED,
            ShmemSegment => sys::UCS_ERR_SHMEM_SEGMENT,
            AlreadyExists => sys::UCS_ERR_ALREADY_EXISTS,
            OutOfRange => sys::UCS_ERR_OUT_OF_RANGE,
            TimedOut => sys::UCS_ERR_TIMED_OUT,
            ExceedsLimit => sys::UCS_ERR_EXCEEDS_LIMIT,
            Unsupported => sys::UCS_ERR_UNSUPPORTED,
            Rejected => sys::UCS_ERR_REJECTED,
            NotConnected => sys::UCS_ERR_NOT_CONNECTED,
            ConnectionReset => sys::UCS_ERR_CONNECTION_RESET,
            EndpointTimeout => sys::UCS_ERR_ENDPOINT_TIMEOUT,
            Other(raw) => raw,
        }
    }

    /// UCX's own text for the status (`ucs_status_string`), e.g. "Message truncated". Before
    /// UCX is loaded (the error that says it could not be), a fixed text.
    pub fn description(self) -> &'static str {
        if !crate::library::is_loaded() {
            return match self {
                Status::NoDevice => "No such device",
                _ => "UCX status (UCX is not loaded)",
            };
        }
        // SAFETY: ucs_status_string accepts any status value and returns a pointer to a static,
        // NUL-terminated string (or a static "Unknown error" text).
        let text = unsafe { CStr::from_ptr(sys::ucs_status_string(self.raw())) };
        text.to_str().unwrap_or("(non-UTF-8 status text)")
    }

    /// Whether the status means the connection to the peer failed or ended (as an endpoint's
    /// error callback reports it, or a close towards a peer already gone ends), not a local
    /// mistake: a reset, a timeout (the endpoint's keepalive, or the transport's: a TCP
    /// connection whose bytes went unacknowledged past its user timeout fails what was in flight
    /// on it with `UCS_ERR_TIMED_OUT`), unreachable, not connected, or one of UCX's link and
    /// endpoint failures (`UCS_ERR_FIRST_LINK_FAILURE` to `UCS_ERR_LAST_ENDPOINT_FAILURE`).
    pub fn is_peer_failure(self) -> bool {
        const LINK_AND_ENDPOINT_FAILURES: std::ops::RangeInclusive<i8> = -89..=-40;
        matches!(
            self,
            Status::ConnectionReset
                | Status::EndpointTimeout
                | Status::TimedOut
                | Status::Unreachable
                | Status::NotConnected
        ) || matches!(self, Status::Other(raw) if LINK_AND_ENDPOINT_FAILURES.contains(&raw))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// A failed UCX call or operation: the [`Status`], the operation that failed, and optionally
/// what it was given (e.g. the configuration name that UCX did not know).
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    op: &'static str,
    detail: Option<Box<str>>,
}

impl Error {
    /// An error from `op` with `status`.
    pub fn new(op: &'static str, status: Status) -> Error {
        Error { status, op, detail: None }
    }

    /// An error that also says what the operation was given or found.
    pub fn with_detail(op: &'static str, status: Status, detail: impl Into<String>) -> Error {
        Error { status, op, detail: Some(detail.into().into_boxed_str()) }
    }

    /// The UCX status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The operation that failed (a UCX function name or a ucx-core method).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Whether the operation was canceled (locally, or because its endpoint closed).
    pub fn is_canceled(&self) -> bool {
        self.status == Status::Canceled
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.status)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// `fn main() -> Result<..>` prints its error with `Debug`: the detail is written as it is, not
/// escaped, so multi-line text (what [`crate::library::load`] tried) reads as lines.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Raw<'a>(&'a str);
        impl fmt::Debug for Raw<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        let mut s = f.debug_struct("Error");
        s.field("status", &self.status).field("op", &self.op);
        if let Some(d) = &self.detail {
            s.field("detail", &Raw(d));
        }
        s.finish()
    }
}

/// `Result` with ucx-core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Ok(())` for `UCS_OK`, the error otherwise (`UCS_INPROGRESS` is not expected here).
pub(crate) fn check(op: &'static str, raw: sys::ucs_status_t) -> Result<()> {
    match Status::from_raw(raw) {
        None => Ok(()),
        Some(s) => Err(Error::new(op, s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_status_round_trips_through_raw() {
        for raw in -100i8..=1 {
            if let Some(s) = Status::from_raw(raw) {
                assert_eq!(s.raw(), raw, "{s:?}");
            }
        }
        assert_eq!(Status::from_raw(sys::UCS_OK), None);
        assert_eq!(Status::from_raw(sys::UCS_ERR_CANCELED), Some(Status::Canceled));
    }

    #[test]
    fn peer_failure_statuses() {
        for s in [
            Status::ConnectionReset,
            Status::EndpointTimeout,
            Status::TimedOut,
            Status::Unreachable,
            Status::NotConnected,
        ] {
            assert!(s.is_peer_failure(), "{s:?}");
        }
        assert!(Status::Other(-45).is_peer_failure(), "a link failure");
        for s in
            [Status::InvalidParam, Status::MessageTruncated, Status::NoMemory, Status::Canceled, Status::Other(-30)]
        {
            assert!(!s.is_peer_failure(), "{s:?}");
        }
    }

    #[test]
    fn messages_name_the_operation_and_ucx_text() {
        let e = Error::new("ucp_tag_recv_nbx", Status::MessageTruncated);
        assert_eq!(e.to_string(), "ucp_tag_recv_nbx: Message truncated");
        let e = Error::with_detail("Context::build", Status::NoElem, "unknown option FOO");
        assert_eq!(e.to_string(), "Context::build: No such element (unknown option FOO)");
        assert_eq!(Status::ConnectionReset.to_string(), "Connection reset by remote peer");
    }
}
