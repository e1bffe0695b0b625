//! `Topology`: the ucx-topology crate for Python. `python/ucp/_libs/topological_distance.py`
//! builds UCX-Py's `TopologicalDistance` on it, and the Dask comm's `net-devices: auto` asks it
//! for `UCX_NET_DEVICES`.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use ucx_topology::{CpuSet, Error, Kind, Origin, Source};

/// Input mistakes are `ValueError`s, a topology that cannot be read an `OSError`.
fn to_py(e: Error) -> PyErr {
    let text = e.to_string();
    match e {
        Error::BadPciBusId { .. }
        | Error::BadCpuList { .. }
        | Error::UnknownKind { .. }
        | Error::UnknownPciDevice { .. }
        | Error::UnknownCudaDevice { .. }
        | Error::BadCudaVisibleDevices { .. } => PyValueError::new_err(text),
        Error::NoNetDevices { .. } => PyRuntimeError::new_err(text),
        _ => PyOSError::new_err(text),
    }
}

/// Exactly one of a PCI bus id, a CUDA index or a CPU set (a list string such as "0-3,8", or
/// an iterable of ints).
fn origin(pci: Option<&str>, cuda: Option<u32>, cpus: Option<&Bound<'_, PyAny>>) -> PyResult<Origin> {
    match (pci, cuda, cpus) {
        (Some(p), None, None) => Ok(Origin::Pci(p.parse().map_err(to_py)?)),
        (None, Some(i), None) => Ok(Origin::Cuda(i)),
        (None, None, Some(c)) => {
            let set: CpuSet = match c.extract::<String>() {
                Ok(s) => s.parse().map_err(to_py)?,
                Err(_) => c.try_iter()?.map(|x| x?.extract::<u32>()).collect::<PyResult<CpuSet>>()?,
            };
            Ok(Origin::Cpus(set))
        }
        _ => Err(PyValueError::new_err("give exactly one of pci=, cuda= or cpus=")),
    }
}

/// A machine's topology: this one's (through hwloc, else sysfs) or an hwloc XML file's.
#[pyclass(module = "ucp._ucx_async", frozen)]
pub struct Topology {
    inner: ucx_topology::Topology,
}

#[pymethods]
impl Topology {
    #[new]
    #[pyo3(signature = (xml=None))]
    fn new(py: Python<'_>, xml: Option<PathBuf>) -> PyResult<Self> {
        // Reading sysfs (or hwloc's discovery) takes milliseconds: other threads may run.
        let inner = py
            .allow_threads(|| match xml {
                Some(path) => ucx_topology::Topology::from_xml(path),
                None => ucx_topology::Topology::system(),
            })
            .map_err(to_py)?;
        Ok(Topology { inner })
    }

    /// Where it came from: "hwloc", "sysfs" or "xml".
    #[getter]
    fn source(&self) -> &'static str {
        match self.inner.source() {
            Source::Hwloc => "hwloc",
            Source::Sysfs => "sysfs",
            Source::Xml => "xml",
        }
    }

    /// `[(distance, name), ...]` for devices of `kind` ("network", "openfabrics", "gpu"),
    /// nearest first.
    #[pyo3(signature = (kind, *, pci=None, cuda=None, cpus=None))]
    fn distances(
        &self,
        kind: &str,
        pci: Option<&str>,
        cuda: Option<u32>,
        cpus: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(u32, String)>> {
        let kind: Kind = kind.parse().map_err(to_py)?;
        let list = self.inner.distances(&origin(pci, cuda, cpus)?, kind).map_err(to_py)?;
        Ok(list.into_iter().map(|d| (d.distance, d.name)).collect())
    }

    /// The `UCX_NET_DEVICES` value for the devices nearest the origin.
    #[pyo3(signature = (*, pci=None, cuda=None, cpus=None))]
    fn net_devices(&self, pci: Option<&str>, cuda: Option<u32>, cpus: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        Ok(self.inner.net_devices(&origin(pci, cuda, cpus)?).map_err(to_py)?.to_string())
    }

    /// `net-devices: auto` for a process driving CUDA device `cuda_device` (index among the
    /// visible ones): the devices nearest it, else nearest the CPUs the process may run on
    /// (`ucx_topology::Topology::auto_net_devices`, the one home of that rule).
    fn auto_net_devices(&self, cuda_device: u32) -> PyResult<String> {
        Ok(self.inner.auto_net_devices(cuda_device).map_err(to_py)?.to_string())
    }

    /// One `UCX_NET_DEVICES` value per rail of a multi-rail group: a NIC each, nearest the
    /// origin first, reused in order when there are fewer NICs than rails.
    #[pyo3(signature = (rails, *, pci=None, cuda=None, cpus=None))]
    fn rail_devices(
        &self,
        rails: usize,
        pci: Option<&str>,
        cuda: Option<u32>,
        cpus: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<String>> {
        let list = self.inner.rail_devices(&origin(pci, cuda, cpus)?, rails).map_err(to_py)?;
        Ok(list.iter().map(ToString::to_string).collect())
    }

    /// `rail_devices` from the `auto` origin: CUDA device `cuda_device` (index among the
    /// visible ones) if visible, else the CPUs this process may run on
    /// (`ucx_topology::Topology::auto_rail_devices`).
    fn auto_rail_devices(&self, cuda_device: u32, rails: usize) -> PyResult<Vec<String>> {
        let list = self.inner.auto_rail_devices(cuda_device, rails).map_err(to_py)?;
        Ok(list.iter().map(ToString::to_string).collect())
    }

    /// The PCI bus id of CUDA device `index` as this process sees it.
    fn cuda_bus_id(&self, index: u32) -> PyResult<String> {
        Ok(self.inner.cuda_bus_id(index).map_err(to_py)?.to_string())
    }

    /// The NVIDIA GPUs' bus ids, in bus id order.
    fn nvidia_gpus(&self) -> Vec<String> {
        self.inner.nvidia_gpus().iter().map(|g| g.to_string()).collect()
    }

    fn __repr__(&self) -> String {
        format!("<Topology from {}: {} NVIDIA GPUs>", self.source(), self.inner.nvidia_gpus().len())
    }
}
