//! The topology both routes (hwloc, sysfs) produce: the PCI tree, the OS devices on it, and each
//! device's CPU locality. Distances are computed here, once, on this model, so the two routes
//! answer alike whenever they read the same tree.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use crate::{CpuSet, Error, PciBusId};

/// The kinds of device a distance can be asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Network interfaces with a PCI device (`eth0`, `ib0`, `enp1s0f0`): hwloc's
    /// `HWLOC_OBJ_OSDEV_NETWORK`, sysfs's `/sys/class/net`. Virtual ones (`lo`, bridges) have
    /// no place in the PCI tree and are left out.
    Network,
    /// InfiniBand/RoCE devices (`mlx5_0`): hwloc's `HWLOC_OBJ_OSDEV_OPENFABRICS`, sysfs's
    /// `/sys/class/infiniband`.
    OpenFabrics,
    /// NVIDIA GPUs (PCI vendor 10de, display class 03xx), named by PCI bus id.
    Gpu,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Network => "network",
            Kind::OpenFabrics => "openfabrics",
            Kind::Gpu => "gpu",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = Error;

    /// `network`, `openfabrics` or `gpu`, as UCX-Py named the first two.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "network" => Ok(Kind::Network),
            "openfabrics" => Ok(Kind::OpenFabrics),
            "gpu" => Ok(Kind::Gpu),
            _ => Err(Error::UnknownKind { input: s.to_owned() }),
        }
    }
}

/// One device and its distance from the origin of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Distance {
    pub distance: u32,
    /// Interface or device name (`ib0`, `mlx5_0`); for a GPU its PCI bus id.
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    HostBridge,
    /// A PCI-to-PCI bridge (switch port, root port).
    Bridge,
    Device,
}

#[derive(Clone, Debug)]
pub(crate) struct PciNode {
    pub kind: NodeKind,
    /// None for a host bridge.
    pub bus_id: Option<PciBusId>,
    pub parent: Option<usize>,
    pub vendor: u16,
    /// Class and subclass (`0x0302`: 3D controller).
    pub class: u16,
    /// The CPUs local to the device; empty when unknown (then every CPU counts as local).
    pub locality: CpuSet,
}

#[derive(Clone, Debug)]
pub(crate) struct OsDev {
    pub name: String,
    pub kind: Kind,
    /// Index of its PCI device in `Model::nodes`.
    pub pci: usize,
    /// InfiniBand ports (1-based) whose state is ACTIVE; `None` when no port state is known
    /// (network interfaces, or a device whose ports were not read).
    pub active_ports: Option<Vec<u32>>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    pub nodes: Vec<PciNode>,
    pub osdevs: Vec<OsDev>,
}

const NVIDIA: u16 = 0x10de;

impl PciNode {
    pub fn is_nvidia_gpu(&self) -> bool {
        self.kind == NodeKind::Device && self.vendor == NVIDIA && self.class >> 8 == 0x03
    }
}

/// Where a distance is measured from, once resolved to the model.
#[derive(Clone, Debug)]
pub(crate) enum Start<'a> {
    Pci(usize),
    Cpus(&'a CpuSet),
}

impl Model {
    pub fn find_pci(&self, id: PciBusId) -> Option<usize> {
        self.nodes.iter().position(|n| n.bus_id == Some(id))
    }

    /// NVIDIA GPUs in PCI bus id order.
    pub fn nvidia_gpus(&self) -> Vec<PciBusId> {
        let mut ids: Vec<PciBusId> = self.nodes.iter().filter(|n| n.is_nvidia_gpu()).filter_map(|n| n.bus_id).collect();
        ids.sort();
        ids
    }

    /// PCI level: a host bridge is 0, anything below a PCI node one more than it. A tree with
    /// no host bridge on top is read as if one were there.
    fn level(&self, mut i: usize) -> u32 {
        let mut level = 0;
        loop {
            let node = &self.nodes[i];
            if node.kind == NodeKind::HostBridge {
                return level;
            }
            level += 1;
            match node.parent {
                Some(p) => i = p,
                None => return level,
            }
        }
    }

    /// The lowest PCI node above or at both, if they share a PCI tree.
    fn common_ancestor(&self, a: usize, b: usize) -> Option<usize> {
        let mut above_a = Vec::new();
        let mut i = Some(a);
        while let Some(n) = i {
            above_a.push(n);
            i = self.nodes[n].parent;
        }
        let mut j = Some(b);
        while let Some(n) = j {
            if above_a.contains(&n) {
                return Some(n);
            }
            j = self.nodes[n].parent;
        }
        None
    }

    /// The distance definition (lib.rs): from a PCI device, how many PCI levels up to the
    /// lowest common ancestor, counting an ancestor at or above the host bridge as level 0;
    /// from a CPU set, 0/1/2 by how much of the set is local to the device.
    pub(crate) fn distance(&self, from: &Start<'_>, to: usize) -> u32 {
        match from {
            Start::Pci(a) => {
                let top = self.common_ancestor(*a, to).map_or(0, |c| self.level(c));
                self.level(*a) - top
            }
            Start::Cpus(cpus) => {
                let local = &self.nodes[to].locality;
                if local.is_empty() || cpus.is_subset(local) {
                    0
                } else if cpus.intersects(local) {
                    1
                } else {
                    2
                }
            }
        }
    }

    /// Devices of `kind`, nearest first; ties in name order (numbers compared as numbers), so
    /// both routes list them alike. A GPU origin is not listed among the GPUs.
    pub fn distances(&self, from: &Start<'_>, kind: Kind) -> Vec<Distance> {
        let mut out: Vec<Distance> = match kind {
            Kind::Gpu => self
                .nodes
                .iter()
                .enumerate()
                .filter(|(i, n)| n.is_nvidia_gpu() && !matches!(from, Start::Pci(a) if a == i))
                .filter_map(|(i, n)| {
                    n.bus_id.map(|id| Distance { distance: self.distance(from, i), name: id.to_string() })
                })
                .collect(),
            _ => self
                .osdevs
                .iter()
                .filter(|d| d.kind == kind)
                .map(|d| Distance { distance: self.distance(from, d.pci), name: d.name.clone() })
                .collect(),
        };
        out.sort_by(|a, b| a.distance.cmp(&b.distance).then_with(|| natural_cmp(&a.name, &b.name)));
        out.dedup();
        out
    }
}

/// Compares names with their digit runs as numbers: `mlx5_2` < `mlx5_10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db)).then(na.cmp(&nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    &d[z.min(d.len().saturating_sub(1))..]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn node(kind: NodeKind, bus: Option<&str>, parent: Option<usize>, cpus: &str) -> PciNode {
        let (vendor, class) = match kind {
            NodeKind::Device => (0x15b3, 0x0207),
            _ => (0x8086, 0x0604),
        };
        PciNode {
            kind,
            bus_id: bus.map(|b| b.parse().unwrap()),
            parent,
            vendor,
            class,
            locality: cpus.parse().unwrap(),
        }
    }

    /// A DGX-shaped model built by hand, without hwloc: host bridge, root port, switch
    /// upstream port, downstream ports, then two GPUs and one NIC per switch; one switch per
    /// socket here, and a NIC straight under the second host bridge.
    pub fn small_dgx() -> Model {
        use NodeKind::*;
        let mut m = Model::default();
        let mut add = |n: PciNode| {
            m.nodes.push(n);
            m.nodes.len() - 1
        };
        let hb0 = add(node(HostBridge, None, None, "0-3"));
        let rp = add(node(Bridge, Some("00:01.0"), Some(hb0), "0-3"));
        let up = add(node(Bridge, Some("01:00.0"), Some(rp), "0-3"));
        let mut gpus = vec![];
        for (dn, dev) in [("02:00.0", "03:00.0"), ("02:01.0", "04:00.0")] {
            let d = add(node(Bridge, Some(dn), Some(up), "0-3"));
            let mut g = node(Device, Some(dev), Some(d), "0-3");
            (g.vendor, g.class) = (NVIDIA, 0x0302);
            gpus.push(add(g));
        }
        let d = add(node(Bridge, Some("02:02.0"), Some(up), "0-3"));
        let nic0 = add(node(Device, Some("05:00.0"), Some(d), "0-3"));
        let hb1 = add(node(HostBridge, None, None, "4-7"));
        let nic1 = add(node(Device, Some("80:00.0"), Some(hb1), "4-7"));
        for (name, kind, pci) in [
            ("ib0", Kind::Network, nic0),
            ("mlx5_0", Kind::OpenFabrics, nic0),
            ("ib1", Kind::Network, nic1),
            ("mlx5_1", Kind::OpenFabrics, nic1),
        ] {
            m.osdevs.push(OsDev { name: name.into(), kind, pci, active_ports: Some(vec![1]) });
        }
        m
    }

    fn pairs(v: &[Distance]) -> Vec<(u32, &str)> {
        v.iter().map(|d| (d.distance, d.name.as_str())).collect()
    }

    #[test]
    fn gpu_distances_count_pci_levels_to_the_common_ancestor() {
        let m = small_dgx();
        let gpu0 = m.find_pci("03:00.0".parse().unwrap()).unwrap();
        // GPU0 is at level 4 (host bridge, root port, switch up, switch down, GPU); ib0 meets it
        // at the switch's upstream port (level 2), ib1 only above the host bridges (0).
        assert_eq!(pairs(&m.distances(&Start::Pci(gpu0), Kind::Network)), [(2, "ib0"), (4, "ib1")]);
        assert_eq!(pairs(&m.distances(&Start::Pci(gpu0), Kind::OpenFabrics)), [(2, "mlx5_0"), (4, "mlx5_1")]);
        assert_eq!(pairs(&m.distances(&Start::Pci(gpu0), Kind::Gpu)), [(2, "0000:04:00.0")]);
        // From a NIC right under its host bridge: level 1, so everything is 1 or 0 away.
        let nic1 = m.find_pci("80:00.0".parse().unwrap()).unwrap();
        assert_eq!(pairs(&m.distances(&Start::Pci(nic1), Kind::Network)), [(0, "ib1"), (1, "ib0")]);
    }

    #[test]
    fn the_true_common_ancestor_counts_when_levels_differ() {
        // GPU0 one switch deeper than in small_dgx (level 5): ib0 still meets it at the outer
        // switch's upstream port (level 2), so 3 away; climbing both in step would miss that.
        let mut m = small_dgx();
        let gpu0 = m.find_pci("03:00.0".parse().unwrap()).unwrap();
        let mut inner = m.nodes[gpu0].clone();
        (inner.kind, inner.bus_id, inner.vendor, inner.class) =
            (NodeKind::Bridge, Some("03:00.0".parse().unwrap()), 0x10b5, 0x0604);
        m.nodes.push(inner);
        let inner = m.nodes.len() - 1;
        m.nodes[gpu0].parent = Some(inner);
        m.nodes[gpu0].bus_id = Some("0c:00.0".parse().unwrap());
        let from = Start::Pci(gpu0);
        assert_eq!(pairs(&m.distances(&from, Kind::Network)), [(3, "ib0"), (5, "ib1")]);
    }

    #[test]
    fn cpu_distances_say_how_local_the_set_is() {
        let m = small_dgx();
        let cpus = |s: &str| s.parse::<CpuSet>().unwrap();
        let local = cpus("1-2");
        assert_eq!(pairs(&m.distances(&Start::Cpus(&local), Kind::Network)), [(0, "ib0"), (2, "ib1")]);
        let both = cpus("3-4");
        assert_eq!(pairs(&m.distances(&Start::Cpus(&both), Kind::Network)), [(1, "ib0"), (1, "ib1")]);
        let far = cpus("5");
        assert_eq!(pairs(&m.distances(&Start::Cpus(&far), Kind::Gpu)), [(2, "0000:03:00.0"), (2, "0000:04:00.0")]);
    }

    #[test]
    fn names_sort_with_numbers_as_numbers() {
        let mut v = vec!["mlx5_10", "mlx5_2", "ib1", "mlx5_02", "eth0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["eth0", "ib1", "mlx5_2", "mlx5_02", "mlx5_10"]);
    }

    #[test]
    fn kinds_parse_and_unknown_ones_are_named() {
        assert_eq!("openfabrics".parse::<Kind>().unwrap(), Kind::OpenFabrics);
        let err = "block".parse::<Kind>().unwrap_err();
        assert!(err.to_string().contains("\"block\""), "{err}");
    }
}
