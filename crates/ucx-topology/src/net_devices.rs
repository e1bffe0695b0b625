//! Automatic device choice: the devices nearest a GPU or a CPU set, spelt as UCX's
//! `UCX_NET_DEVICES` wants them.

use std::fmt;

use crate::model::Kind;
use crate::{CpuSet, Error, Origin, Topology};

/// A `UCX_NET_DEVICES` value: [`fmt::Display`] joins the devices with commas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetDevices {
    /// UCX device names: `mlx5_0:1` (an InfiniBand/RoCE device and port, for UCX's `rc`, `ud`,
    /// `dc` transports) and `ib0`/`eth0` (an interface, for `tcp`).
    pub devices: Vec<String>,
    /// The distance of the chosen devices from the origin.
    pub distance: u32,
}

impl fmt::Display for NetDevices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.devices.join(","))
    }
}

impl Topology {
    /// The devices nearest `origin`, all of them when several are equally near:
    /// - if the machine has InfiniBand/RoCE devices with a usable port, the nearest ones, each
    ///   with its ACTIVE ports (`mlx5_0:1`; port 1 when no state is known; a device whose
    ///   ports are all down is passed over, as UCX would find no port on it), followed by the
    ///   network interfaces of those same PCI devices (`ib0`), so that UCX's tcp transport, if
    ///   used, takes the same NIC;
    /// - otherwise the nearest network interfaces (`eth0`).
    ///
    /// [`Error::NoNetDevices`] when there is neither.
    pub fn net_devices(&self, origin: &Origin) -> Result<NetDevices, Error> {
        let nics = self.nics(origin)?;
        let distance = nics[0].distance;
        let nearest: Vec<&Nic> = nics.iter().take_while(|n| n.distance == distance).collect();
        // The devices first, then their interfaces (UCX's order of preference).
        let mut devices: Vec<String> = nearest.iter().flat_map(|n| n.ports.iter().cloned()).collect();
        let mut nets: Vec<String> = nearest.iter().flat_map(|n| n.interfaces.iter().cloned()).collect();
        nets.sort_by(|a, b| crate::model::natural_cmp(a, b));
        nets.dedup();
        devices.extend(nets);
        Ok(NetDevices { devices, distance })
    }

    /// `net-devices: auto` for a process that drives CUDA device `cuda_device` (its index among
    /// the visible ones; a rank's local rank, each rank on a host driving its own GPU): the
    /// devices nearest that GPU or, when it is not visible (or `CUDA_VISIBLE_DEVICES` cannot be
    /// read), nearest the CPUs the process may run on. The one rule behind the Dask comm's
    /// `net-devices: auto`, the Python collectives' `net_devices="auto"` and the Rust
    /// examples' `--net-devices auto`.
    pub fn auto_net_devices(&self, cuda_device: u32) -> Result<NetDevices, Error> {
        self.net_devices(&self.auto_origin(cuda_device)?)
    }

    /// Where `auto` choices measure from: CUDA device `cuda_device` (its index among the
    /// visible ones) or, when it is not visible (or `CUDA_VISIBLE_DEVICES` cannot be read),
    /// the CPUs this process may run on.
    pub fn auto_origin(&self, cuda_device: u32) -> Result<Origin, Error> {
        let gpu = Origin::Cuda(cuda_device);
        match self.start(&gpu) {
            Ok(_) => Ok(gpu),
            Err(Error::UnknownCudaDevice { .. } | Error::BadCudaVisibleDevices { .. }) => {
                Ok(Origin::Cpus(CpuSet::current_affinity()?))
            }
            Err(e) => Err(e),
        }
    }

    /// [`Topology::rail_devices`] from [`Topology::auto_origin`]: a rail group's devices
    /// chosen by itself, for a process driving CUDA device `cuda_device` (else from its CPUs).
    pub fn auto_rail_devices(&self, cuda_device: u32, rails: usize) -> Result<Vec<NetDevices>, Error> {
        self.rail_devices(&self.auto_origin(cuda_device)?, rails)
    }

    /// One `UCX_NET_DEVICES` value per rail of a multi-rail group of `rails` rails from
    /// `origin`: one NIC each (its ports and interfaces, as [`Topology::net_devices`] spells
    /// them), nearest first, ties in name order. With fewer NICs than rails the NICs are used
    /// again in the same order: a rail per NIC is what pays; more rails only share them.
    pub fn rail_devices(&self, origin: &Origin, rails: usize) -> Result<Vec<NetDevices>, Error> {
        let nics = self.nics(origin)?;
        Ok((0..rails)
            .map(|i| {
                let n = &nics[i % nics.len()];
                NetDevices { devices: n.ports.iter().chain(&n.interfaces).cloned().collect(), distance: n.distance }
            })
            .collect())
    }

    /// The usable NICs, nearest `origin` first (ties in name order): the InfiniBand/RoCE
    /// devices with a usable port if there are any, else the network interfaces; never empty.
    fn nics(&self, origin: &Origin) -> Result<Vec<Nic>, Error> {
        let start = self.start(origin)?;
        let model = self.model();
        let usable = |d: &crate::model::OsDev| d.active_ports.as_ref().is_none_or(|p| !p.is_empty());
        let by_distance = |kind: Kind| {
            let mut devs: Vec<(u32, &crate::model::OsDev)> = model
                .osdevs
                .iter()
                .filter(|d| d.kind == kind && usable(d))
                .map(|d| (model.distance(&start, d.pci), d))
                .collect();
            devs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| crate::model::natural_cmp(&a.1.name, &b.1.name)));
            devs
        };
        let ib = by_distance(Kind::OpenFabrics);
        let nics: Vec<Nic> = if !ib.is_empty() {
            ib.into_iter()
                .map(|(distance, d)| {
                    let ports = d.active_ports.clone().unwrap_or_else(|| vec![1]);
                    let mut interfaces: Vec<String> = model
                        .osdevs
                        .iter()
                        .filter(|n| n.kind == Kind::Network && n.pci == d.pci)
                        .map(|n| n.name.clone())
                        .collect();
                    interfaces.sort_by(|a, b| crate::model::natural_cmp(a, b));
                    Nic { distance, ports: ports.iter().map(|p| format!("{}:{p}", d.name)).collect(), interfaces }
                })
                .collect()
        } else {
            by_distance(Kind::Network)
                .into_iter()
                .map(|(distance, d)| Nic { distance, ports: Vec::new(), interfaces: vec![d.name.clone()] })
                .collect()
        };
        if nics.is_empty() {
            return Err(Error::NoNetDevices { from: origin.to_string() });
        }
        Ok(nics)
    }
}

/// One NIC as UCX names it: an InfiniBand/RoCE device's ports (`mlx5_0:1`) and the network
/// interfaces of the same PCI device (`ib0`), or a plain interface (`eth0`).
struct Nic {
    distance: u32,
    ports: Vec<String>,
    interfaces: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::small_dgx;
    use crate::Source;

    fn topo() -> Topology {
        Topology::from_model_for_tests(small_dgx(), Source::Xml)
    }

    #[test]
    fn a_gpu_gets_its_switch_nic() {
        let t = topo();
        let nd = t.net_devices(&Origin::Pci("03:00.0".parse().unwrap())).unwrap();
        assert_eq!(nd.to_string(), "mlx5_0:1,ib0");
        assert_eq!(nd.distance, 2);
    }

    #[test]
    fn ties_are_kept_together() {
        let t = topo();
        let both = Origin::Cpus("3-4".parse().unwrap());
        assert_eq!(t.net_devices(&both).unwrap().to_string(), "mlx5_0:1,mlx5_1:1,ib0,ib1");
    }

    #[test]
    fn without_openfabrics_the_nearest_interfaces() {
        let mut m = small_dgx();
        m.osdevs.retain(|d| d.kind == Kind::Network);
        let t = Topology::from_model_for_tests(m, Source::Xml);
        let nd = t.net_devices(&Origin::Cpus("5".parse().unwrap())).unwrap();
        assert_eq!((nd.to_string(), nd.distance), ("ib1".to_owned(), 0));
    }

    #[test]
    fn a_device_with_every_port_down_is_passed_over() {
        let mut m = small_dgx();
        m.osdevs.iter_mut().filter(|d| d.name == "mlx5_0").for_each(|d| d.active_ports = Some(vec![]));
        let t = Topology::from_model_for_tests(m.clone(), Source::Xml);
        let gpu0 = Origin::Pci("03:00.0".parse().unwrap());
        assert_eq!(t.net_devices(&gpu0).unwrap().to_string(), "mlx5_1:1,ib1");
        // Unknown states: port 1 is assumed.
        m.osdevs.iter_mut().filter(|d| d.name == "mlx5_0").for_each(|d| d.active_ports = None);
        let t = Topology::from_model_for_tests(m, Source::Xml);
        assert_eq!(t.net_devices(&gpu0).unwrap().to_string(), "mlx5_0:1,ib0");
    }

    #[test]
    fn each_rail_gets_its_own_nic_nearest_first_and_they_are_reused_past_the_count() {
        let t = topo();
        let gpu0 = Origin::Pci("03:00.0".parse().unwrap());
        let rails: Vec<String> = t.rail_devices(&gpu0, 3).unwrap().iter().map(|d| d.to_string()).collect();
        assert_eq!(rails, ["mlx5_0:1,ib0", "mlx5_1:1,ib1", "mlx5_0:1,ib0"]);
        assert_eq!(t.rail_devices(&gpu0, 1).unwrap()[0], t.net_devices(&gpu0).unwrap());
        assert!(t.rail_devices(&gpu0, 0).unwrap().is_empty());
    }

    #[test]
    fn nothing_to_choose_is_an_error_naming_the_origin() {
        let mut m = small_dgx();
        m.osdevs.clear();
        let t = Topology::from_model_for_tests(m, Source::Xml);
        let err = t.net_devices(&Origin::Cpus("5".parse().unwrap())).unwrap_err();
        assert!(err.to_string().contains("CPUs 5"), "{err}");
    }
}
