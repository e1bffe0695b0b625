//! This machine's real topology: hwloc's and sysfs's routes agree, and both agree with what
//! hwloc's tools (`lstopo`, `hwloc-calc`) say. Works on any machine, GPU or not; the parts that
//! need hwloc or its tools say so and skip when they are missing.

mod common;

use std::collections::BTreeMap;

use ucx_topology::{CpuSet, Error, Kind, Origin, Source, Topology};

const KINDS: [Kind; 3] = [Kind::Network, Kind::OpenFabrics, Kind::Gpu];

fn origins(t: &Topology) -> Vec<Origin> {
    let mut o: Vec<Origin> = t.pci_devices().into_iter().map(Origin::Pci).collect();
    o.push(Origin::Cpus(CpuSet::current_affinity().unwrap()));
    for cpu in CpuSet::current_affinity().unwrap().iter() {
        o.push(Origin::Cpus([cpu].into_iter().collect()));
    }
    o
}

#[test]
fn system_uses_hwloc_exactly_when_it_loads() {
    let t = Topology::system().unwrap();
    match Topology::hwloc_unavailable_reason() {
        None => assert_eq!(t.source(), Source::Hwloc),
        Some(why) => {
            println!("hwloc unavailable ({why}): the system topology comes from sysfs");
            assert_eq!(t.source(), Source::Sysfs);
        }
    }
}

#[test]
fn hwloc_and_sysfs_give_the_same_answers_here() {
    let sysfs = Topology::from_sysfs().unwrap();
    let hwloc = match Topology::from_hwloc() {
        Ok(t) => t,
        Err(e) => return println!("skipped: {e}"),
    };
    assert_eq!(hwloc.pci_devices(), sysfs.pci_devices());
    println!("{} PCI functions", sysfs.pci_devices().len());
    let mut compared = 0;
    for origin in origins(&sysfs) {
        for kind in KINDS {
            assert_eq!(
                hwloc.distances(&origin, kind).unwrap(),
                sysfs.distances(&origin, kind).unwrap(),
                "{origin} {kind}"
            );
            compared += 1;
        }
        let (a, b) = (hwloc.net_devices(&origin), sysfs.net_devices(&origin));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{origin}");
    }
    println!("compared {compared} lists");
}

#[test]
fn answers_match_lstopo_here() {
    let t = Topology::system().unwrap();
    let tree = match common::lstopo(None) {
        Ok(tree) => tree,
        Err(why) => return println!("skipped the comparison with lstopo: {why}"),
    };
    let pci_lines: Vec<String> = tree.iter().filter(|l| l.kind == "PCI").filter_map(|l| l.id.clone()).collect();
    assert!(!pci_lines.is_empty(), "lstopo shows no PCI device");
    for id in &pci_lines {
        for kind in KINDS {
            let ours: BTreeMap<String, u32> = t
                .distances(&Origin::Pci(id.parse().unwrap()), kind)
                .unwrap()
                .into_iter()
                .map(|d| (d.name, d.distance))
                .collect();
            assert_eq!(ours, common::distances(&tree, id, kind.as_str()), "from {id}, {kind}");
        }
    }
    // Every interface lstopo shows is ours too (the map comparison above needs a PCI line).
    let ours = t.distances(&Origin::Cpus(CpuSet::current_affinity().unwrap()), Kind::Network).unwrap();
    for i in common::devices(&tree, "network") {
        let name = tree[i].id.as_deref().unwrap();
        assert!(ours.iter().any(|d| d.name == name), "{name} missing from {ours:?}");
    }
}

#[test]
fn cpu_distances_match_hwloc_calc_here() {
    let t = Topology::system().unwrap();
    let all = CpuSet::current_affinity().unwrap();
    let nets = t.distances(&Origin::Cpus(all.clone()), Kind::Network).unwrap();
    for d in &nets {
        let local = match common::hwloc_calc_locality(None, &d.name) {
            Ok(l) => l,
            Err(why) => return println!("skipped the comparison with hwloc-calc: {why}"),
        };
        for cpu in all.iter() {
            let from_cpu = t.distances(&Origin::Cpus([cpu].into_iter().collect()), Kind::Network).unwrap();
            let got = from_cpu.iter().find(|x| x.name == d.name).unwrap().distance;
            assert_eq!(got == 0, local.contains(&cpu), "{} from CPU {cpu}: {got}, hwloc-calc {local:?}", d.name);
        }
    }
}

#[test]
fn sysfs_lists_the_pci_interfaces_and_not_the_virtual_ones() {
    let t = Topology::from_sysfs().unwrap();
    let ours: Vec<String> = t
        .distances(&Origin::Cpus(CpuSet::current_affinity().unwrap()), Kind::Network)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    for entry in std::fs::read_dir("/sys/class/net").unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let real = std::fs::canonicalize(entry.path()).unwrap();
        let on_pci = real.to_string_lossy().contains("/devices/pci");
        assert_eq!(ours.contains(&name), on_pci, "{name} ({}) in {ours:?}", real.display());
    }
}

#[test]
fn cuda_indices_resolve_to_this_machines_gpus_or_fail_clearly() {
    let t = Topology::system().unwrap();
    let gpus = t.nvidia_gpus();
    match t.cuda_bus_id(0) {
        Ok(id) => assert!(gpus.contains(&id), "{id} not among {gpus:?}"),
        Err(e) => {
            assert!(matches!(e, Error::UnknownCudaDevice { index: 0, .. }), "{e}");
            assert!(gpus.is_empty() || std::env::var_os("CUDA_VISIBLE_DEVICES").is_some(), "{e}");
        }
    }
    let err = t.distances(&Origin::Cuda(4096), Kind::Network).unwrap_err();
    assert!(err.to_string().contains("no CUDA device 4096"), "{err}");
}

#[test]
fn cuda_and_pci_order_agree_where_cuda_runs() {
    // With a CUDA driver and GPUs, cuda_bus_id asks CUDA; the PCI-order rule (used without
    // CUDA) must give the same devices, and the same order under CUDA_DEVICE_ORDER=PCI_BUS_ID.
    let t = Topology::system().unwrap();
    if t.nvidia_gpus().is_empty() {
        return println!("skipped: no NVIDIA GPU here");
    }
    let env = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    if env.as_deref().is_some_and(|v| v.contains("GPU-") || v.contains("MIG-")) {
        return println!("skipped: CUDA_VISIBLE_DEVICES names UUIDs, which the PCI-order rule refuses");
    }
    let by_rule: Vec<_> = (0..).map_while(|i| t.cuda_bus_id_with(i, env.as_deref()).ok()).collect();
    let by_cuda: Vec<_> = (0..).map_while(|i| t.cuda_bus_id(i).ok()).collect();
    if std::env::var("CUDA_DEVICE_ORDER").as_deref() == Ok("PCI_BUS_ID") {
        assert_eq!(by_cuda, by_rule);
    } else {
        let (mut a, mut b) = (by_cuda.clone(), by_rule.clone());
        a.sort();
        b.sort();
        assert_eq!(a, b, "CUDA {by_cuda:?}, PCI order {by_rule:?}");
    }
}
