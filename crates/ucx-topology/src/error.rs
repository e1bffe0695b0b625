//! The crate's one error type: every way a question can be wrong or a topology can fail to load,
//! each naming the input at fault.

use std::fmt;
use std::path::PathBuf;

/// What went wrong. Input errors (`BadPciBusId`, `BadCpuList`, `UnknownKind`,
/// `BadCudaVisibleDevices`) carry the text they were given; lookup errors name what was looked
/// for and what exists.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A PCI bus id that is not `[domain:]bus:device[.function]` in hex
    /// (`0000:3b:00.0`, `3b:00.0`, `00000000:3B:00.0`).
    BadPciBusId { input: String, reason: &'static str },
    /// A CPU list that is not Linux's list format (`0-3,8,10-11`).
    BadCpuList { input: String, reason: &'static str },
    /// A device kind other than `network`, `openfabrics` or `gpu`.
    UnknownKind { input: String },
    /// A well-formed PCI bus id with no device of that id in the topology.
    UnknownPciDevice { bus_id: String },
    /// A CUDA device index beyond the GPUs this process can see.
    UnknownCudaDevice { index: u32, visible: usize },
    /// A `CUDA_VISIBLE_DEVICES` entry this crate cannot resolve without CUDA (a `GPU-…` or
    /// `MIG-…` UUID).
    BadCudaVisibleDevices { value: String, reason: &'static str },
    /// An hwloc XML file that hwloc would not load (missing, unreadable, not hwloc XML).
    XmlLoad { path: PathBuf, reason: String },
    /// libhwloc could not be used: not installed, not ABI 2.x, or a symbol missing. Only
    /// XML topologies need it; the system's topology falls back to sysfs.
    HwlocUnavailable { reason: String },
    /// An hwloc call failed while loading the system's topology.
    Hwloc { call: &'static str, errno: i32 },
    /// A sysfs file or directory the fallback needs could not be read.
    Sysfs { path: PathBuf, source: std::io::Error },
    /// No network or openfabrics device to put in `UCX_NET_DEVICES`.
    NoNetDevices { from: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadPciBusId { input, reason } => {
                write!(f, "bad PCI bus id {input:?}: {reason} (expected e.g. \"0000:3b:00.0\")")
            }
            Error::BadCpuList { input, reason } => {
                write!(f, "bad CPU list {input:?}: {reason} (expected e.g. \"0-3,8\")")
            }
            Error::UnknownKind { input } => {
                write!(f, "unknown device kind {input:?}: expected \"network\", \"openfabrics\" or \"gpu\"")
            }
            Error::UnknownPciDevice { bus_id } => {
                write!(f, "no PCI device {bus_id} in this topology")
            }
            Error::UnknownCudaDevice { index, visible } => {
                write!(f, "no CUDA device {index}: {visible} visible (after CUDA_VISIBLE_DEVICES)")
            }
            Error::BadCudaVisibleDevices { value, reason } => {
                write!(f, "CUDA_VISIBLE_DEVICES={value:?}: {reason}")
            }
            Error::XmlLoad { path, reason } => {
                write!(f, "hwloc could not load the XML topology {}: {reason}", path.display())
            }
            Error::HwlocUnavailable { reason } => write!(f, "hwloc is unavailable: {reason}"),
            Error::Hwloc { call, errno } => write!(f, "{call} failed: {}", std::io::Error::from_raw_os_error(*errno)),
            Error::Sysfs { path, source } => write!(f, "reading {}: {source}", path.display()),
            Error::NoNetDevices { from } => {
                write!(f, "no network or openfabrics device is reachable from {from}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sysfs { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// This crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
