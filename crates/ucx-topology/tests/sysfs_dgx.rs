//! The sysfs route on a DGX-like machine without the hardware or hwloc: a copy of sysfs's
//! layout (directories, attribute files, class links) built in a temporary directory with the
//! same shape as tests/data/dgx.xml. The answers must be the hand-worked ones, and, where
//! libhwloc is present, equal to hwloc's answers for dgx.xml.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use ucx_topology::{CpuSet, Error, Kind, Origin, Topology};

struct FakeSys(PathBuf);

impl Drop for FakeSys {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A PCI function at `dir` (under `root/devices`), linked from `bus/pci/devices`.
fn function(root: &Path, dir: &Path, class: &str, vendor: &str, cpus: &str) {
    write(&dir.join("class"), &format!("{class}\n"));
    write(&dir.join("vendor"), &format!("{vendor}\n"));
    write(&dir.join("local_cpulist"), &format!("{cpus}\n"));
    let id = dir.file_name().unwrap();
    let link = root.join("bus/pci/devices").join(id);
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    symlink(dir, link).unwrap();
}

fn class_link(root: &Path, class: &str, name: &str, target: &Path) {
    fs::create_dir_all(target).unwrap();
    let link = root.join("class").join(class).join(name);
    fs::create_dir_all(link.parent().unwrap()).unwrap();
    symlink(target, link).unwrap();
}

/// dgx.xml's machine as sysfs would show it, in a directory of the test's own.
fn fake_dgx(test: &str) -> FakeSys {
    let root = std::env::temp_dir().join(format!("ucx-topology-sysfs-{}-{test}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let fake = FakeSys(root.clone());
    let bridge = "0x060400";
    let nic_no = |bus: u8| match bus {
        0x01 => 0,
        0x06 => 1,
        0x81 => 2,
        _ => 3,
    };
    for (hb, cpus, switches) in [("pci0000:00", "0-3", [0x01u8, 0x06]), ("pci0000:80", "4-7", [0x81, 0x86])] {
        let hb_dir = root.join("devices").join(hb);
        for (port, up) in switches.iter().enumerate() {
            let rp = hb_dir.join(format!("0000:{}:{:02x}.0", &hb[8..10], port + 1));
            function(&root, &rp, bridge, "0x8086", cpus);
            let up_dir = rp.join(format!("0000:{up:02x}:00.0"));
            function(&root, &up_dir, bridge, "0x10b5", cpus);
            for i in 0..3u8 {
                let down = up_dir.join(format!("0000:{:02x}:{i:02x}.0", up + 1));
                function(&root, &down, bridge, "0x10b5", cpus);
                let dev = down.join(format!("0000:{:02x}:00.0", up + 2 + i));
                if i < 2 {
                    function(&root, &dev, "0x030200", "0x10de", cpus);
                } else {
                    function(&root, &dev, "0x020700", "0x15b3", cpus);
                    let n = nic_no(*up);
                    class_link(&root, "net", &format!("ib{n}"), &dev.join(format!("net/ib{n}")));
                    let ib = dev.join(format!("infiniband/mlx5_{n}"));
                    class_link(&root, "infiniband", &format!("mlx5_{n}"), &ib);
                    let states: &[(u32, &str)] =
                        if n == 2 { &[(1, "1: DOWN"), (2, "4: ACTIVE")] } else { &[(1, "4: ACTIVE")] };
                    for (p, state) in states {
                        write(&ib.join(format!("ports/{p}/state")), &format!("{state}\n"));
                    }
                }
            }
        }
        if hb == "pci0000:00" {
            let rp = hb_dir.join("0000:00:03.0");
            function(&root, &rp, bridge, "0x8086", cpus);
            let eth = rp.join("0000:0b:00.0");
            function(&root, &eth, "0x020000", "0x8086", cpus);
            class_link(&root, "net", "enp11s0f0", &eth.join("net/enp11s0f0"));
        }
    }
    class_link(&root, "net", "lo", &root.join("devices/virtual/net/lo"));
    fake
}

fn pairs(t: &Topology, o: &Origin, kind: Kind) -> Vec<(u32, String)> {
    t.distances(o, kind).unwrap().into_iter().map(|d| (d.distance, d.name)).collect()
}

#[test]
fn sysfs_route_answers_for_a_dgx_like_machine() {
    let fake = fake_dgx("answers");
    let t = Topology::from_sysfs_root(&fake.0).unwrap();
    assert_eq!(t.nvidia_gpus().len(), 8);
    let gpu0 = Origin::Pci("0000:03:00.0".parse().unwrap());
    let want: Vec<(u32, String)> = [(2, "ib0"), (4, "enp11s0f0"), (4, "ib1"), (4, "ib2"), (4, "ib3")]
        .iter()
        .map(|(d, n)| (*d, n.to_string()))
        .collect();
    assert_eq!(pairs(&t, &gpu0, Kind::Network), want);
    let gpu4 = Origin::Pci(t.cuda_bus_id_with(4, None).unwrap());
    assert_eq!(t.net_devices(&gpu4).unwrap().to_string(), "mlx5_2:2,ib2");
    let socket1 = Origin::Cpus("4-7".parse::<CpuSet>().unwrap());
    assert_eq!(t.net_devices(&socket1).unwrap().to_string(), "mlx5_2:2,mlx5_3:1,ib2,ib3");
}

#[test]
fn sysfs_and_hwloc_agree_on_the_dgx_shape() {
    let fake = fake_dgx("agree");
    let sysfs = Topology::from_sysfs_root(&fake.0).unwrap();
    let xml = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dgx.xml");
    let hwloc = match Topology::from_xml(xml) {
        Ok(t) => t,
        Err(Error::HwlocUnavailable { reason }) => return println!("skipped: {reason}"),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(sysfs.pci_devices(), hwloc.pci_devices());
    let mut origins: Vec<Origin> = hwloc.pci_devices().into_iter().map(Origin::Pci).collect();
    for cpus in ["0", "0-3", "3-4", "4-7", "0-7"] {
        origins.push(Origin::Cpus(cpus.parse().unwrap()));
    }
    for o in &origins {
        for kind in [Kind::Network, Kind::OpenFabrics, Kind::Gpu] {
            assert_eq!(sysfs.distances(o, kind).unwrap(), hwloc.distances(o, kind).unwrap(), "{o} {kind}");
        }
        assert_eq!(sysfs.net_devices(o).unwrap(), hwloc.net_devices(o).unwrap(), "{o}");
    }
}

#[test]
fn a_sysfs_without_pci_has_no_devices_and_missing_sysfs_is_an_error() {
    let root = std::env::temp_dir().join(format!("ucx-topology-sysfs-{}-nopci", std::process::id()));
    fs::create_dir_all(root.join("class/net")).unwrap();
    let _cleanup = FakeSys(root.clone());
    let t = Topology::from_sysfs_root(&root).unwrap();
    assert!(t.pci_devices().is_empty());
    let err = t.net_devices(&Origin::Cpus("0".parse().unwrap())).unwrap_err();
    assert!(matches!(err, Error::NoNetDevices { .. }), "{err}");
    let wrong = root.join("class/net/nothing-here");
    let err = Topology::from_sysfs_root(&wrong).unwrap_err();
    assert!(matches!(err, Error::Sysfs { .. }) && err.to_string().contains("nothing-here"), "{err}");
}
