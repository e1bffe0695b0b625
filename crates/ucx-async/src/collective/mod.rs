//! Collectives over N ranks: a [`Communicator`] connects every rank to every other (bootstrap
//! through rank 0's listener, then worker addresses), and offers point-to-point messages by
//! rank, `barrier`, `allgather` and `alltoallv`.
//!
//! - `tag`: the tag layout (user tag, source rank, batch) and its limits, without I/O.
//! - `launch`: rank, size, how to reach rank 0 (an address, or a rendezvous file) and whether
//!   the ranks use peer error handling (`UCXA_ERROR_HANDLING`), from
//!   torchrun, Open MPI or PMI variables.
//! - `bootstrap`: the hello and address-table messages, and their exchange.
//! - `path`: how an `alltoallv` part travels ([`DataPath`]: one message, or batches through a
//!   pool of bounce buffers, [`Bounce`]).
//! - `communicator`: [`Communicator`] itself.
//! - `shared_window`: [`SharedWindow`], an `alltoallv` through shared-memory windows (each part copied once,
//!   into the receiver's memory) for ranks on one host.
//! - `device` (feature `cuda`): `alltoallv` between `cust` device buffers.
mod bootstrap;
mod communicator;
#[cfg(feature = "cuda")]
mod device;
mod launch;
mod path;
mod shared_window;
mod tag;

pub use communicator::{Communicator, BOOTSTRAP_TIMEOUT};
pub use launch::{Launch, Root, RENDEZVOUS_FILE};
pub use path::{Bounce, DataPath, AUTO_MIN_PART};
pub use shared_window::SharedWindow;
pub use tag::{MAX_BATCHES, MAX_RANKS, MAX_USER_TAG};
