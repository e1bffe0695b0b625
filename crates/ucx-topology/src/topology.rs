//! [`Topology`]: one loaded topology (the system's through hwloc or sysfs, or an XML file's
//! through hwloc) and the questions asked of it: distances from a GPU or CPU set, and which
//! CUDA device is which PCI device.

use std::fmt;
use std::path::Path;

use crate::model::{Model, Start};
use crate::{cuda, hwloc, sysfs, CpuSet, Distance, Error, Kind, PciBusId};

/// Where a query starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A PCI device (normally a GPU) by bus id.
    Pci(PciBusId),
    /// A CUDA device by index, as the process sees it (after `CUDA_VISIBLE_DEVICES`).
    Cuda(u32),
    /// A set of CPUs, e.g. a rank's affinity ([`CpuSet::current_affinity`]).
    Cpus(CpuSet),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Pci(id) => write!(f, "PCI device {id}"),
            Origin::Cuda(i) => write!(f, "CUDA device {i}"),
            Origin::Cpus(c) => write!(f, "CPUs {c}"),
        }
    }
}

/// Where a topology came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This machine, through libhwloc.
    Hwloc,
    /// This machine, through sysfs (no usable libhwloc).
    Sysfs,
    /// An hwloc XML file (through libhwloc): another machine's, or a synthetic one.
    Xml,
}

/// A loaded topology. It holds a copy of what it needs (no hwloc handle), so it is `Send`,
/// `Sync` and cheap to keep.
#[derive(Clone, Debug)]
pub struct Topology {
    model: Model,
    source: Source,
}

impl Topology {
    /// This machine's topology: through hwloc when `libhwloc.so.15` loads (and loads the
    /// topology), else through sysfs.
    pub fn system() -> Result<Topology, Error> {
        // A failed hwloc discovery falls back too: sysfs answers the same questions.
        match Topology::from_hwloc() {
            Ok(t) => Ok(t),
            Err(_) => Topology::from_sysfs(),
        }
    }

    /// This machine's topology through hwloc, or [`Error::HwlocUnavailable`].
    pub fn from_hwloc() -> Result<Topology, Error> {
        let api = hwloc::ffi::system().map_err(|reason| Error::HwlocUnavailable { reason })?;
        Ok(Topology { model: hwloc::load(api, None)?, source: Source::Hwloc })
    }

    /// This machine's topology through sysfs, without hwloc.
    pub fn from_sysfs() -> Result<Topology, Error> {
        Topology::from_sysfs_root("/sys")
    }

    /// The topology of a sysfs tree mounted or copied at `root` (its `bus/pci/devices` and
    /// `class/{net,infiniband}` with their links).
    pub fn from_sysfs_root(root: impl AsRef<Path>) -> Result<Topology, Error> {
        Ok(Topology { model: sysfs::load(root.as_ref())?, source: Source::Sysfs })
    }

    /// The topology an hwloc XML file describes (`lstopo --of xml`, or written by hand). Needs
    /// libhwloc: [`Error::HwlocUnavailable`] without it, [`Error::XmlLoad`] when hwloc refuses
    /// the file.
    pub fn from_xml(path: impl AsRef<Path>) -> Result<Topology, Error> {
        let api = hwloc::ffi::system().map_err(|reason| Error::HwlocUnavailable { reason })?;
        Ok(Topology { model: hwloc::load(api, Some(path.as_ref()))?, source: Source::Xml })
    }

    /// Why [`Topology::system`] does not use hwloc on this machine, or `None` when it does.
    pub fn hwloc_unavailable_reason() -> Option<String> {
        hwloc::ffi::system().err()
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// The NVIDIA GPUs, in PCI bus id order (physical, before `CUDA_VISIBLE_DEVICES`).
    pub fn nvidia_gpus(&self) -> Vec<PciBusId> {
        self.model.nvidia_gpus()
    }

    /// Every PCI device and bridge, in bus id order.
    pub fn pci_devices(&self) -> Vec<PciBusId> {
        let mut ids: Vec<PciBusId> = self.model.nodes.iter().filter_map(|n| n.bus_id).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The PCI bus id of CUDA device `index`, as this process sees it (module `cuda`'s rules:
    /// CUDA's own answer for the system's topology when a CUDA driver works, else PCI order
    /// after `CUDA_VISIBLE_DEVICES`).
    pub fn cuda_bus_id(&self, index: u32) -> Result<PciBusId, Error> {
        if self.source != Source::Xml {
            if let Some(answer) = cuda::ask_cuda(index) {
                return answer;
            }
        }
        self.cuda_bus_id_with(index, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
    }

    /// As [`Topology::cuda_bus_id`] without asking CUDA, for a given `CUDA_VISIBLE_DEVICES`
    /// (`None`: unset): GPUs in PCI bus id order, as with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
    pub fn cuda_bus_id_with(&self, index: u32, cuda_visible_devices: Option<&str>) -> Result<PciBusId, Error> {
        let visible = cuda::visible(cuda_visible_devices, &self.model.nvidia_gpus())?;
        visible.get(index as usize).copied().ok_or(Error::UnknownCudaDevice { index, visible: visible.len() })
    }

    pub(crate) fn model(&self) -> &Model {
        &self.model
    }

    /// `origin` resolved to the model. The CPU set is borrowed from `origin`.
    pub(crate) fn start<'a>(&self, origin: &'a Origin) -> Result<Start<'a>, Error> {
        let pci = |id: PciBusId| {
            self.model.find_pci(id).map(Start::Pci).ok_or(Error::UnknownPciDevice { bus_id: id.to_string() })
        };
        match origin {
            Origin::Pci(id) => pci(*id),
            Origin::Cuda(i) => pci(self.cuda_bus_id(*i)?),
            Origin::Cpus(cpus) => Ok(Start::Cpus(cpus)),
        }
    }

    /// The devices of `kind` with their distances from `origin` (definition in the crate
    /// docs), nearest first, ties in name order.
    pub fn distances(&self, origin: &Origin, kind: Kind) -> Result<Vec<Distance>, Error> {
        Ok(self.model.distances(&self.start(origin)?, kind))
    }
}

#[cfg(test)]
impl Topology {
    pub(crate) fn from_model_for_tests(model: Model, source: Source) -> Topology {
        Topology { model, source }
    }
}
