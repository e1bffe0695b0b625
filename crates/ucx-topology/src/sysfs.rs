//! The sysfs route, for machines without libhwloc: the PCI tree from the paths of
//! `/sys/bus/pci/devices/*` (a device's path lists the bridges above it), network and
//! InfiniBand devices from `/sys/class/{net,infiniband}`, localities from each PCI device's
//! `local_cpulist`. It reads the same files hwloc's Linux backend reads, into the same
//! [`Model`], so both routes give the same distances.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::model::{Kind, Model, NodeKind, OsDev, PciNode};
use crate::{CpuSet, Error, PciBusId};

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Sysfs { path: path.to_path_buf(), source }
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn hex_u32(path: &Path) -> u32 {
    read_trimmed(path).and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()).unwrap_or(0)
}

/// `pciDDDD:BB`: a PCI root (host bridge) directory.
fn is_root(component: &str) -> bool {
    component
        .strip_prefix("pci")
        .is_some_and(|r| r.len() >= 7 && r.split_once(':').is_some_and(|(d, b)| d.len() >= 4 && b.len() == 2))
}

/// A full `DDDD:BB:DD.F` name (sysfs always writes the domain).
fn bus_id(component: &str) -> Option<PciBusId> {
    (component.matches(':').count() == 2 && component.contains('.')).then(|| component.parse().ok()).flatten()
}

struct Builder {
    root: PathBuf,
    model: Model,
    by_key: HashMap<String, usize>,
}

impl Builder {
    /// The node for a PCI device's real path, with the host bridge and bridges above it.
    fn chain(&mut self, real: &Path) -> Option<usize> {
        let comps: Vec<String> = real.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let start = comps.iter().position(|c| is_root(c))?;
        let mut parent = None;
        let mut dir = comps[..start].iter().collect::<PathBuf>();
        for c in &comps[start..] {
            dir.push(c);
            let node = if is_root(c) {
                self.node(c, || PciNode {
                    kind: NodeKind::HostBridge,
                    bus_id: None,
                    parent,
                    vendor: 0,
                    class: 0,
                    locality: CpuSet::new(),
                })
            } else if let Some(id) = bus_id(c) {
                let d = dir.clone();
                self.node(c, || {
                    let class = (hex_u32(&d.join("class")) >> 8) as u16;
                    PciNode {
                        kind: if class == 0x0604 { NodeKind::Bridge } else { NodeKind::Device },
                        bus_id: Some(id),
                        parent,
                        vendor: hex_u32(&d.join("vendor")) as u16,
                        class,
                        locality: read_trimmed(&d.join("local_cpulist"))
                            .and_then(|s| s.parse().ok())
                            .unwrap_or_default(),
                    }
                })
            } else {
                // Not PCI (a virtio or USB device below a PCI function): the PCI part ends.
                break;
            };
            parent = Some(node);
        }
        parent.filter(|&n| self.model.nodes[n].kind != NodeKind::HostBridge)
    }

    fn node(&mut self, key: &str, make: impl FnOnce() -> PciNode) -> usize {
        if let Some(&i) = self.by_key.get(key) {
            return i;
        }
        self.model.nodes.push(make());
        let i = self.model.nodes.len() - 1;
        self.by_key.insert(key.to_owned(), i);
        i
    }

    /// Devices of one class directory (`class/net`): each with a PCI device above it.
    fn class(&mut self, class: &str, kind: Kind) -> Result<(), Error> {
        let dir = self.root.join("class").join(class);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        let mut names: Vec<String> =
            entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            let link = dir.join(&name);
            let Ok(real) = fs::canonicalize(&link) else { continue };
            // Virtual devices (lo, bridges, ifb) have no PCI device: none of the path parses.
            let Some(pci) = self.chain(&real) else { continue };
            let active_ports = if kind == Kind::OpenFabrics { active_ports(&link) } else { None };
            self.model.osdevs.push(OsDev { name, kind, pci, active_ports });
        }
        Ok(())
    }
}

/// InfiniBand ports whose `state` reads `4: ACTIVE`; None when no port has a readable state.
fn active_ports(dev: &Path) -> Option<Vec<u32>> {
    let entries = fs::read_dir(dev.join("ports")).ok()?;
    let states: Vec<(u32, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let port = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((port, read_trimmed(&e.path().join("state"))?))
        })
        .collect();
    if states.is_empty() {
        return None;
    }
    let mut ports: Vec<u32> = states.into_iter().filter(|(_, s)| s.starts_with("4:")).map(|(p, _)| p).collect();
    ports.sort_unstable();
    Some(ports)
}

/// Loads the topology under `root` (`/sys`, or a copy of its layout in tests).
pub(crate) fn load(root: &Path) -> Result<Model, Error> {
    let mut b = Builder { root: root.to_path_buf(), model: Model::default(), by_key: HashMap::new() };
    // Not a sysfs at all (a wrong root) is an error; every sysfs has `class`.
    let class = root.join("class");
    fs::metadata(&class).map_err(io_err(&class))?;
    let devices = root.join("bus/pci/devices");
    // A machine without PCI (a virtio-mmio guest) has no such directory: no PCI devices, as
    // hwloc would say, rather than an error.
    let listing = match fs::read_dir(&devices) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        other => Some(other.map_err(io_err(&devices))?),
    };
    let mut names: Vec<_> = listing.into_iter().flatten().filter_map(|e| e.ok()).map(|e| e.path()).collect();
    names.sort();
    for link in names {
        if let Ok(real) = fs::canonicalize(&link) {
            b.chain(&real);
        }
    }
    b.class("net", Kind::Network)?;
    b.class("infiniband", Kind::OpenFabrics)?;
    Ok(b.model)
}
