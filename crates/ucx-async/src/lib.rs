#![doc = include_str!("../README.md")]
//!
//! # Map of the crate
//! - [`Worker`] (`worker`): a ucx-core worker plus its reactor task; [`ProgressMode`]
//!   (`reactor`): event (sleep on the fd), polling, adaptive.
//! - [`Listener`] (`listener`) and [`Endpoint`] (`endpoint`): connect and accept with the
//!   handshake (`handshake`, [`Tags`]), tag and stream messaging, flush, close, abort; failure
//!   and close reach every pending receive; what a peer leaves unreceived is capped
//!   ([`Worker::set_max_unclaimed_bytes`]); active messages the UCX-Py way (`am`: memory-type
//!   header, per-endpoint queues, [`AmAllocator`] per memory type).
//! - `liveness`: whether an endpoint is up, and the receives that fail promptly when it goes down.
//! - `single_copy`: an endpoint's side of the same-host single-copy path (the hello exchange
//!   after the handshake, large sends as descriptors, received descriptors read from the
//!   sender's memory), with a peer that carried its mark.
//! - `op`: the futures that await one ucx-core operation (borrowed or owned buffer).
//! - [`try_join_posted`] (`posting`): several operations submitted before any is waited for;
//!   `window`: a window of them in flight, taken back oldest first (the bounce-buffer pipeline).
//! - [`collective`]: [`Communicator`] over N ranks (bootstrap, messages by rank, `barrier`,
//!   `allgather`, `alltoallv`) and [`Launch`], the launcher's variables.
//! - [`multirail`]: [`RailGroup`], one connection over several endpoints (rails, each on its
//!   own worker and devices), [`RailListener`], which accepts groups from many clients, and
//!   [`Split`], how a message is cut over them (shares, stages).
//! - [`Error`] (`error`): what failed, by cause (closed by us or by the peer, peer failed,
//!   closed for what the peer left unreceived, handshake timeout, protocol violation, no
//!   listener answered, or UCX's own error); [`Result`]. `connect_error`: a failed connect's
//!   error, naming the address.
//!
//! ucx-core is re-exported as [`core`] for everything not wrapped here.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod am;
pub mod collective;
mod connect_error;
mod endpoint;
mod error;
mod handshake;
mod listener;
mod liveness;
pub mod multirail;
mod op;
mod posting;
mod reactor;
mod single_copy;
mod window;
mod worker;

pub use am::{AmAllocator, AmBuffer};
pub use collective::{Communicator, Launch};
pub use endpoint::{ConnectOptions, Endpoint, DEFAULT_CONNECT_TIMEOUT};
pub use error::{Error, Result};
pub use handshake::Tags;
pub use listener::{Incoming, Listener};
pub use multirail::{RailGroup, RailListener, Split};
pub use posting::try_join_posted;
pub use reactor::ProgressMode;
pub use ucx_core as core;
pub use ucx_core::wire::Flavour;
pub use worker::Worker;

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of docs/getting-started.md, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/getting-started.md")]
pub struct GettingStartedDoctests;

/// The Rust examples of docs/multirail.md (multi-rail and topology), compiled and run as
/// doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/multirail.md")]
pub struct MultirailDoctests;
