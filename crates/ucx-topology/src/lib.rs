//! Which network interfaces, InfiniBand/RoCE devices and GPUs are nearest a GPU or a set of
//! CPUs, and the `UCX_NET_DEVICES` value that follows: UCX-Py's `topological_distance`, in
//! Rust, with a fallback for machines without hwloc.
//!
//! ```no_run
//! use ucx_topology::{Kind, Origin, Topology};
//!
//! let topo = Topology::system()?; // hwloc if installed, else sysfs
//! for d in topo.distances(&Origin::Cuda(0), Kind::OpenFabrics)? {
//!     println!("{} at {}", d.name, d.distance); // mlx5_0 at 2, mlx5_1 at 4, ...
//! }
//! println!("UCX_NET_DEVICES={}", topo.net_devices(&Origin::Cuda(0))?); // mlx5_0:1,ib0
//! # Ok::<(), ucx_topology::Error>(())
//! ```
//!
//! # Map of the crate
//! - [`Topology`] (`topology`): load (the system's, an XML file's), ask distances from an
//!   [`Origin`] (PCI bus id, CUDA index, CPU set), CUDA index → bus id.
//! - `net_devices`: [`NetDevices`], [`Topology::net_devices`]: the nearest devices as a
//!   `UCX_NET_DEVICES` value.
//! - `model`: the PCI tree both routes fill, [`Kind`], [`Distance`], and the distance
//!   computation itself.
//! - `hwloc` (and `hwloc::ffi`): the hwloc route, libhwloc opened at run time.
//! - `sysfs`: the fallback route.
//! - `cuda`: CUDA device index → PCI bus id.
//! - [`PciBusId`] (`pci`), [`CpuSet`] (`cpuset`): the inputs, parsed and checked.
//! - [`Error`] (`error`).
//!
//! # Why hwloc is opened at run time
//! The crate `dlopen`s `libhwloc.so.15` (hwloc's 2.x ABI) with `libloading` and declares the
//! few structs it reads by hand, checked against hwloc 2.9's header by a test (`hwloc::ffi`'s `layout_matches_hwloc_h`).
//! Linking hwloc (our own bindgen build, or the `hwlocality`/`hwloc2` crates, which link it)
//! would make every program that uses the crate fail to *start* where libhwloc is missing; the
//! issue asks for a fallback to sysfs when hwloc is absent at run time, which only a run-time
//! load can give. It also builds with no hwloc headers, as on docs.rs. The cost, a hand-kept
//! ABI, is small: nine functions and five structs, stable across hwloc 2.x, and the version is
//! checked on load (`hwloc_get_api_version` must say 2.x).
//!
//! Both routes fill the same model (`model::Model`), and distances are computed only there, so
//! they agree whenever they read the same tree; `tests/system.rs` compares them on the machine
//! that runs the tests. Only XML files need hwloc.
//!
//! # Distance
//! As UCX-Py's `topological_distance` defined it (`get_osdev_distance_to_pcidev`): the PCI
//! bridge depth of the lowest common ancestor of the GPU and the device, subtracted from the
//! GPU's own. Precisely, with *level* = 0 for a host bridge and one more for each PCI bridge or
//! device below it:
//!
//! > **distance(GPU, device)** = level(GPU) − level(lowest common PCI ancestor of the GPU and
//! > the device's PCI device), where an ancestor above the host bridges (the two are under
//! > different host bridges, or sockets) counts as level 0.
//!
//! So it counts the PCI hops from the GPU up to where the paths meet: on a DGX-like machine
//! (GPU at level 4 behind a switch) the NIC on the GPU's own switch is 2 away, every other one
//! 4, as in UCX-Py's example. It is the same for any PCI device as origin, not only GPUs.
//! UCX-Py read both depths from hwloc's bridge attribute, which hwloc 2.9 fills in for PCI
//! devices too (their level: 4 for that GPU) and reads as 0 above the host bridges, so its
//! numbers are these: applied with hwloc 2.9 to `tests/data/dgx.xml`, UCX-Py's formula gives
//! the same distance for all 117 (PCI device, NIC) pairs (a one-off check while writing this,
//! not a shipped test). It found the ancestor by climbing both objects one level at a time in
//! step, which misses the true lowest common ancestor when the two sit at different PCI levels
//! below it (a GPU behind two nested switches, a NIC behind the outer one only): UCX-Py then
//! counts up to the host bridge (5 in that variant of `dgx.xml`, where the paths meet 3 levels
//! above the GPU); here the true lowest common ancestor is used (3).
//!
//! UCX-Py had no CPU-set origin. **distance(CPU set, device)** is 0 when every CPU of the set
//! is local to the device (in the cpuset of the device's nearest non-I/O ancestor in hwloc,
//! its `local_cpulist` in sysfs; a device of unknown locality is local to every CPU), 1 when
//! some are, 2 when none are.
//!
//! Lists are sorted by distance, then by name with digit runs compared as numbers (UCX-Py left
//! ties in no particular order; a fixed order makes both routes list them alike).
//!
//! # CUDA device index
//! See module `cuda`: CUDA's own answer when a CUDA driver works and the topology is this
//! machine's; otherwise NVIDIA GPUs in PCI bus id order (what `CUDA_DEVICE_ORDER=PCI_BUS_ID`
//! gives), after `CUDA_VISIBLE_DEVICES`.
#![deny(unsafe_op_in_unsafe_fn)]

mod cpuset;
mod cuda;
mod error;
mod hwloc;
mod model;
mod net_devices;
mod pci;
mod sysfs;
mod topology;

pub use cpuset::CpuSet;
pub use error::{Error, Result};
pub use model::{Distance, Kind};
pub use net_devices::NetDevices;
pub use pci::PciBusId;
pub use topology::{Origin, Source, Topology};
