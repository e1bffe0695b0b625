#![doc = include_str!("../README.md")]
//!
//! Nothing here knows tokio or asyncio.
//!
//! # Map of the crate
//! - [`Context`] / [`ContextBuilder`] (`context`): features and UCX options; [`Config`]
//!   (`config`) reads and prints UCX's configuration.
//! - [`Worker`] (`worker`): progress, the wakeup fd (`arm`/`signal`), address, flush, fence.
//! - [`Listener`] and [`ConnRequest`] (`listener`): client-server connection set-up.
//! - [`Endpoint`] (`endpoint`): connect by socket address or worker address, accept, peer
//!   errors, close. `tcp_family`: the address family UCX's tcp transport uses on each device,
//!   and the refusal of a connection or listener of the other family (UCX 1.22 corrupts the
//!   heap on an IPv6 connection through an IPv4 tcp interface).
//! - Operations, each in its own module and returning a [`Submitted`]: `tag` (send on an
//!   endpoint, receive and probe on the worker), `stream`, `am` (active messages and their
//!   handlers), `rma` (memory registration, remote keys, put/get).
//! - [`Request`] (`request`): an in-flight operation; wakes a `std::task::Waker`, cancels,
//!   and keeps UCX from touching a buffer that has gone away ([`wakes_here`]: how many
//!   completions woke a task on this thread). [`Owned`] (`owned`): the same on a buffer the
//!   operation owns, whose drop never blocks.
//! - [`Inflight`] (`inflight`): operations tracked by id until their completion is taken,
//!   for callers that cannot await each one where they submitted it (the Python bindings).
//! - [`Unclaimed`] (`unclaimed`): messages that arrived before their receive, taken out of
//!   UCX's unexpected queue by tag so that what a peer leaves unreceived is counted and capped;
//!   [`StreamBacklog`] (`stream_backlog`): the same for an endpoint's unread stream bytes.
//! - [`StuckConnections`] (`stuck_connections`): lets go of connections to a listener's port
//!   that make UCX 1.22's connection manager spin (garbage, then close).
//! - [`SendBuffer`] / [`RecvBuffer`] and [`MemoryType`] (`buffer`): what operations read and
//!   write; with feature `cuda`, `cust` device buffers too. [`SendChunks`] / [`RecvChunks`]
//!   (`chunks`): byte ranges of a buffer as buffers, for messages split into chunks.
//! - [`wire`]: UCX-Py's and UCXX's wire formats (handshake, control message, AM header) as
//!   pure encode/decode functions.
//! - [`library`]: finds and opens UCX at run time (`dlopen`; nothing is linked), and the table
//!   of UCX's functions that `sys` (bindgen's declarations, rewritten by build.rs) calls through.
//! - [`huge_pages`]: large host buffers advised onto transparent huge pages (cheaper for
//!   CMA's shared-memory copies), as NumPy's arrays are; [`HugeSharedMapping`]
//!   (`huge_shared`): shared memory UCX maps, attached again at a 2 MiB boundary on huge pages;
//!   `proc_maps`: which shared mapping of this process holds a range (for both, and `rma`).
//! - [`Error`] / [`Status`] (`error`); `log` adds to an error what UCX logged while the call
//!   failed (e.g. which transport name was bad). [`version`], [`live`] (live-object counts for
//!   leak tests).
//! - `floor` (hidden): the bottom rung of the latency ladder, UCX's calls as `ucx_perftest`
//!   makes them with none of this crate's objects, for `examples/core_lat.rs --raw`.
//!
//! # Ownership
//! Parents outlive children by construction: endpoints, listeners and requests hold their
//! [`Worker`], workers their [`Context`], remote keys their [`Endpoint`]. Every handle is
//! `Send + Sync` (workers use `UCS_THREAD_MODE_MULTI`); callbacks run on the thread that
//! calls [`Worker::progress`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod address;
mod am;
mod buffer;
mod chunks;
mod config;
mod context;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub use cuda::{DeviceBytes, DeviceBytesMut};
mod endpoint;
mod error;
#[doc(hidden)]
pub mod floor;
pub mod huge_pages;
mod huge_shared;
pub mod inflight;
pub mod library;
mod listener;
pub mod live;
mod log;
mod owned;
mod proc_maps;
mod request;
mod rma;
mod sockaddr;
mod stream;
pub mod stream_backlog;
pub mod stuck_connections;
mod sys;
mod tag;
mod tcp_family;
mod text;
pub mod unclaimed;
pub mod version;
pub mod wire;
mod worker;

pub use address::WorkerAddress;
pub use am::{AmMessage, AmProto, AmSendOptions};
pub use buffer::{MemoryType, Pod, RecvBuffer, SendBuffer};
pub use chunks::{RecvChunks, SendChunks};
pub use config::Config;
pub use context::{Context, ContextBuilder, Features, LIBRARY_DEFAULTS};
pub use endpoint::{CloseMode, Endpoint, EndpointParams};
pub use error::{Error, Result, Status};
pub use huge_shared::HugeSharedMapping;
pub use inflight::Inflight;
pub use listener::{ConnRequest, Listener};
pub use owned::Owned;
pub use request::{wakes_here, Completion, Request, Submitted};
pub use rma::{MemoryHandle, RemoteKey};
pub use stream_backlog::{StreamBacklog, StreamData};
pub use stuck_connections::StuckConnections;
pub use tag::{ProbeInfo, ProbedMessage, FULL_MASK};
pub use unclaimed::{Hold, Overflow, Unclaimed};
pub use worker::{
    device_spin, spin_budget, spin_budget_even_if_shared, spin_yield_period, Armed, Batch, IdleYield, Spin, ThreadMode,
    Worker, CONTENDED_YIELD, DEVICE_BYTES_PER_US, DEVICE_SPIN, MAX_DEVICE_SPIN, MAX_SIZE_SPIN, PROGRESS_BATCH,
    SPIN_BYTES_PER_US, SPIN_CLOCK_ROUNDS, SPIN_WAKEUP_ROUNDS, SPIN_YIELD_ROUNDS, SPIN_YIELD_ROUNDS_CONTENDED,
};
