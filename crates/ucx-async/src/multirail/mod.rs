//! Multi-rail: one message split over several endpoints to the same peer (rails), each
//! usually on its own worker and UCX context so that it can use its own devices
//! (`UCX_NET_DEVICES`, `UCX_TLS`). On a node with several NICs, a rail per NIC adds their
//! bandwidth; UCX's own multi-rail (`UCX_MAX_RNDV_RAILS`) does this inside one endpoint, for
//! the lanes one context can see.
//!
//! - `split`: [`Split`], each rail's share (even, by the seed's ratio, by weights) and the
//!   number of pipeline stages (chunks in flight per rail). Pure arithmetic.
//! - `group`: [`RailGroup`]: connect and accept (each rail says which group and rail it is),
//!   send (a header on rail 0, then every chunk at once; timed per chunk by
//!   `send_profiled`, [`ChunkTime`]), receive (each chunk straight into
//!   its place in the caller's buffer), abort on any rail's failure.
//! - `listener`: [`RailListener`], groups from many clients at once, each assembled from the
//!   rails that name it.
//!
//! The bytes (hello, header, part tags) live in `ucx_core::wire::multirail`.
mod group;
mod listener;
mod split;

pub use group::{ChunkTime, RailGroup};
pub use listener::{RailListener, MAX_INCOMPLETE_GROUPS};
pub use split::Split;
