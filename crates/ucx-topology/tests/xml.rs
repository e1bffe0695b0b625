//! The shipped DGX-like topology (tests/data/dgx.xml), loaded through hwloc: the answers the
//! distance definition gives, worked out by hand, and the same answers from hwloc's own tools.
//! Without libhwloc every test here says so and returns: XML needs hwloc.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ucx_topology::{CpuSet, Error, Kind, Origin, PciBusId, Source, Topology};

fn xml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/dgx.xml")
}

fn dgx() -> Option<Topology> {
    match Topology::from_xml(xml()) {
        Ok(t) => Some(t),
        Err(Error::HwlocUnavailable { reason }) => {
            println!("skipped: XML needs libhwloc: {reason}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn pci(s: &str) -> Origin {
    Origin::Pci(s.parse().unwrap())
}

fn pairs(t: &Topology, o: &Origin, kind: Kind) -> Vec<(u32, String)> {
    t.distances(o, kind).unwrap().into_iter().map(|d| (d.distance, d.name)).collect()
}

fn list(v: &[(u32, &str)]) -> Vec<(u32, String)> {
    v.iter().map(|(d, n)| (*d, n.to_string())).collect()
}

const GPUS: [&str; 8] = [
    "0000:03:00.0",
    "0000:04:00.0",
    "0000:08:00.0",
    "0000:09:00.0",
    "0000:83:00.0",
    "0000:84:00.0",
    "0000:88:00.0",
    "0000:89:00.0",
];

#[test]
fn gpu0_sees_its_switch_nic_at_2_and_the_rest_at_4() {
    let Some(t) = dgx() else { return };
    assert_eq!(t.source(), Source::Xml);
    let gpu0 = pci(GPUS[0]);
    assert_eq!(
        pairs(&t, &gpu0, Kind::Network),
        list(&[(2, "ib0"), (4, "enp11s0f0"), (4, "ib1"), (4, "ib2"), (4, "ib3")])
    );
    assert_eq!(
        pairs(&t, &gpu0, Kind::OpenFabrics),
        list(&[(2, "mlx5_0"), (4, "mlx5_1"), (4, "mlx5_2"), (4, "mlx5_3")])
    );
    let gpus = pairs(&t, &gpu0, Kind::Gpu);
    assert_eq!(gpus[0], (2, GPUS[1].to_owned()));
    assert_eq!(gpus.len(), 7);
    assert!(gpus[1..].iter().all(|(d, _)| *d == 4), "{gpus:?}");
}

#[test]
fn every_gpu_is_nearest_the_nic_on_its_own_switch() {
    let Some(t) = dgx() else { return };
    assert_eq!(t.nvidia_gpus().iter().map(|g| g.to_string()).collect::<Vec<_>>(), GPUS);
    for (i, gpu) in GPUS.iter().enumerate() {
        let got = pairs(&t, &pci(gpu), Kind::OpenFabrics);
        let own = format!("mlx5_{}", i / 2);
        assert_eq!(got[0], (2, own.clone()), "{gpu}: {got:?}");
        assert!(got[1..].iter().all(|(d, n)| *d == 4 && *n != own), "{gpu}: {got:?}");
        // CUDA index i is the i-th GPU in bus id order when nothing hides any.
        assert_eq!(t.cuda_bus_id_with(i as u32, None).unwrap().to_string(), *gpu);
    }
}

#[test]
fn net_devices_per_gpu_use_active_ports_and_the_nics_interface() {
    let Some(t) = dgx() else { return };
    let want = [
        "mlx5_0:1,ib0",
        "mlx5_0:1,ib0",
        "mlx5_1:1,ib1",
        "mlx5_1:1,ib1",
        // mlx5_2 is dual-port with only port 2 ACTIVE.
        "mlx5_2:2,ib2",
        "mlx5_2:2,ib2",
        "mlx5_3:1,ib3",
        "mlx5_3:1,ib3",
    ];
    for (gpu, want) in GPUS.iter().zip(want) {
        let nd = t.net_devices(&pci(gpu)).unwrap();
        assert_eq!((nd.to_string(), nd.distance), (want.to_owned(), 2), "{gpu}");
    }
}

#[test]
fn cuda_visible_devices_picks_the_physical_gpu() {
    let Some(t) = dgx() else { return };
    assert_eq!(t.cuda_bus_id_with(0, Some("5,4")).unwrap().to_string(), GPUS[5]);
    assert_eq!(t.cuda_bus_id_with(1, Some("5,4")).unwrap().to_string(), GPUS[4]);
    let err = t.cuda_bus_id_with(2, Some("5,4")).unwrap_err();
    assert!(matches!(err, Error::UnknownCudaDevice { index: 2, visible: 2 }), "{err}");
    let err = t.cuda_bus_id_with(8, None).unwrap_err();
    assert!(err.to_string().contains("no CUDA device 8: 8 visible"), "{err}");
}

#[test]
fn cpu_sets_rank_the_nics_by_socket() {
    let Some(t) = dgx() else { return };
    let cpus = |s: &str| Origin::Cpus(s.parse::<CpuSet>().unwrap());
    assert_eq!(
        pairs(&t, &cpus("0-1"), Kind::Network),
        list(&[(0, "enp11s0f0"), (0, "ib0"), (0, "ib1"), (2, "ib2"), (2, "ib3")])
    );
    assert!(pairs(&t, &cpus("3-4"), Kind::OpenFabrics).iter().all(|(d, _)| *d == 1));
    assert_eq!(t.net_devices(&cpus("4-7")).unwrap().to_string(), "mlx5_2:2,mlx5_3:1,ib2,ib3");
    let gpus = pairs(&t, &cpus("5"), Kind::Gpu);
    assert_eq!(gpus.iter().filter(|(d, _)| *d == 0).count(), 4, "{gpus:?}");
}

#[test]
fn bad_inputs_are_named_in_the_errors() {
    let Some(t) = dgx() else { return };
    let err = t.distances(&pci("0000:42:00.0"), Kind::Network).unwrap_err();
    assert!(matches!(err, Error::UnknownPciDevice { .. }) && err.to_string().contains("0000:42:00.0"), "{err}");
    let err = "gpu".parse::<Kind>().and_then(|_| "block".parse::<Kind>()).unwrap_err();
    assert!(err.to_string().contains("\"block\""), "{err}");
    let err = "0000:zz:00.0".parse::<PciBusId>().unwrap_err();
    assert!(err.to_string().contains("0000:zz:00.0"), "{err}");
}

#[test]
fn xml_that_does_not_load_is_an_error_naming_the_file() {
    if dgx().is_none() {
        return;
    }
    let missing = Path::new("/nonexistent/topology.xml");
    let err = Topology::from_xml(missing).unwrap_err();
    assert!(matches!(err, Error::XmlLoad { .. }) && err.to_string().contains("/nonexistent/topology.xml"), "{err}");
    let garbage = std::env::temp_dir().join(format!("ucx-topology-garbage-{}.xml", std::process::id()));
    std::fs::write(&garbage, "<topology version=\"2.0\"><object type=\"Nonsense\"").unwrap();
    let err = Topology::from_xml(&garbage).unwrap_err();
    let _ = std::fs::remove_file(&garbage);
    assert!(matches!(err, Error::XmlLoad { .. }) && err.to_string().contains(&*garbage.to_string_lossy()), "{err}");
}

#[test]
fn answers_match_lstopos_tree_of_the_same_xml() {
    let Some(t) = dgx() else { return };
    let tree = match common::lstopo(Some(&xml())) {
        Ok(tree) => tree,
        Err(why) => return println!("skipped the comparison with lstopo: {why}"),
    };
    assert_eq!(common::devices(&tree, "gpu").len(), 8);
    let mut compared = 0;
    for gpu in GPUS {
        for kind in [Kind::Network, Kind::OpenFabrics, Kind::Gpu] {
            let ours: BTreeMap<String, u32> =
                t.distances(&pci(gpu), kind).unwrap().into_iter().map(|d| (d.name, d.distance)).collect();
            let theirs = common::distances(&tree, gpu, kind.as_str());
            assert_eq!(ours, theirs, "{gpu} {kind}");
            compared += ours.len();
        }
    }
    assert_eq!(compared, 8 * (5 + 4 + 7));
}

#[test]
fn cpu_distances_match_hwloc_calc_localities() {
    let Some(t) = dgx() else { return };
    for name in ["ib0", "ib1", "ib2", "ib3", "enp11s0f0", "mlx5_0", "mlx5_3"] {
        let local = match common::hwloc_calc_locality(Some(&xml()), name) {
            Ok(l) => l,
            Err(why) => return println!("skipped the comparison with hwloc-calc: {why}"),
        };
        assert_eq!(local.len(), 4, "{name}: {local:?}");
        let kind = if name.starts_with("mlx5") { Kind::OpenFabrics } else { Kind::Network };
        for cpu in 0..8 {
            let d = t.distances(&Origin::Cpus([cpu].into_iter().collect()), kind).unwrap();
            let d = d.iter().find(|d| d.name == name).unwrap().distance;
            assert_eq!(d == 0, local.contains(&cpu), "{name} from CPU {cpu}: {d}, hwloc-calc {local:?}");
        }
    }
}

#[test]
fn four_rails_from_a_gpu_take_its_switch_nic_first_then_the_others() {
    let Some(t) = dgx() else { return };
    let rails: Vec<String> = t.rail_devices(&pci(GPUS[0]), 4).unwrap().iter().map(|d| d.to_string()).collect();
    // mlx5_2's port 1 is down in the XML: its rail uses port 2.
    assert_eq!(rails, ["mlx5_0:1,ib0", "mlx5_1:1,ib1", "mlx5_2:2,ib2", "mlx5_3:1,ib3"]);
    let from_gpu7: Vec<String> = t.rail_devices(&pci(GPUS[7]), 2).unwrap().iter().map(|d| d.to_string()).collect();
    assert_eq!(from_gpu7[0], "mlx5_3:1,ib3");
}

/// The XML, for tests that name its GPUs by CUDA index: `None` (skipped) where
/// `CUDA_VISIBLE_DEVICES` renumbers them.
fn dgx_by_cuda_index() -> Option<Topology> {
    if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        println!("skipped: CUDA_VISIBLE_DEVICES is set, and it renumbers the XML's GPUs");
        return None;
    }
    dgx()
}

#[test]
fn auto_net_devices_is_the_gpu_rule_else_the_cpu_rule() {
    let Some(t) = dgx_by_cuda_index() else { return };
    for i in 0..GPUS.len() as u32 {
        assert_eq!(t.auto_net_devices(i).unwrap(), t.net_devices(&Origin::Cuda(i)).unwrap(), "GPU {i}");
    }
    assert_eq!(t.auto_net_devices(0).unwrap().to_string(), "mlx5_0:1,ib0");
    // No ninth GPU: the devices nearest the CPUs this process may run on.
    let cpus = Origin::Cpus(CpuSet::current_affinity().unwrap());
    assert_eq!(t.auto_net_devices(GPUS.len() as u32).unwrap(), t.net_devices(&cpus).unwrap());
}

#[test]
fn auto_rail_devices_start_from_the_gpu_else_from_the_cpus() {
    let Some(t) = dgx_by_cuda_index() else { return };
    let names = |l: Vec<ucx_topology::NetDevices>| l.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    assert_eq!(names(t.auto_rail_devices(7, 2).unwrap())[0], "mlx5_3:1,ib3");
    assert_eq!(t.auto_rail_devices(0, 4).unwrap(), t.rail_devices(&pci(GPUS[0]), 4).unwrap());
    let cpus = Origin::Cpus(CpuSet::current_affinity().unwrap());
    assert_eq!(t.auto_rail_devices(GPUS.len() as u32, 3).unwrap(), t.rail_devices(&cpus, 3).unwrap());
}
