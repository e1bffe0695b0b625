//! The hwloc route: load a topology with libhwloc (the running system's, or an XML file's) and
//! copy its PCI tree, OS devices and localities into the crate's [`Model`], then let hwloc go.

pub(crate) mod ffi;

use std::collections::HashMap;
use std::ffi::{c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

use crate::model::{Kind, Model, NodeKind, OsDev, PciNode};
use crate::{CpuSet, Error, PciBusId};
use ffi::Api;

/// An initialised hwloc topology, destroyed on drop.
struct Handle<'a> {
    api: &'a Api,
    topo: ffi::Topology,
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        // SAFETY: `topo` came from hwloc_topology_init and is destroyed once, here; nothing
        // read from it outlives the handle (`walk` copies everything out).
        unsafe { (self.api.topology_destroy)(self.topo) }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Loads the running system's topology (`xml: None`) or an XML file's.
pub(crate) fn load(api: &Api, xml: Option<&Path>) -> Result<Model, Error> {
    let xml_err = |path: &Path, reason: String| Error::XmlLoad { path: path.into(), reason };
    let mut topo: ffi::Topology = ptr::null_mut();
    // SAFETY: hwloc_topology_init writes a new topology to the pointer it is given.
    if unsafe { (api.topology_init)(&mut topo) } != 0 {
        return Err(Error::Hwloc { call: "hwloc_topology_init", errno: errno() });
    }
    let handle = Handle { api, topo };
    // SAFETY: `topo` is initialised and not yet loaded, when filters may be set. KEEP_ALL: every
    // bridge and PCI device, so any device's bus id can be asked about (the default keeps none).
    if unsafe { (api.topology_set_io_types_filter)(topo, ffi::TYPE_FILTER_KEEP_ALL) } != 0 {
        return Err(Error::Hwloc { call: "hwloc_topology_set_io_types_filter", errno: errno() });
    }
    if let Some(path) = xml {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| xml_err(path, "the path contains a NUL byte".into()))?;
        // SAFETY: `topo` is initialised and not loaded; the path is NUL-terminated and hwloc
        // copies it.
        if unsafe { (api.topology_set_xml)(topo, c_path.as_ptr()) } != 0 {
            let reason = std::io::Error::from_raw_os_error(errno()).to_string();
            return Err(xml_err(path, reason));
        }
    }
    // SAFETY: `topo` is initialised and configured.
    if unsafe { (api.topology_load)(topo) } != 0 {
        let e = errno();
        return Err(match xml {
            Some(path) => {
                xml_err(path, format!("not an hwloc XML topology ({})", std::io::Error::from_raw_os_error(e)))
            }
            None => Error::Hwloc { call: "hwloc_topology_load", errno: e },
        });
    }
    // SAFETY: the topology is loaded, and `handle` destroys it only after `walk` returns.
    Ok(unsafe { walk(&handle) })
}

/// The objects at one of hwloc's (virtual) depths.
///
/// # Safety
/// `h.topo` must be loaded.
unsafe fn objects(h: &Handle<'_>, depth: c_int) -> Vec<*mut ffi::Obj> {
    // SAFETY: per this function's contract; indexes stay below the count hwloc reports.
    unsafe {
        let n = (h.api.get_nbobjs_by_depth)(h.topo, depth);
        (0..n).map(|i| (h.api.get_obj_by_depth)(h.topo, depth, i)).filter(|o| !o.is_null()).collect()
    }
}

/// A bitmap as a [`CpuSet`]; an infinite or unreadable one as empty (unknown locality).
///
/// # Safety
/// `bitmap` must be null or a live hwloc bitmap.
unsafe fn cpuset(api: &Api, bitmap: ffi::Bitmap) -> CpuSet {
    if bitmap.is_null() {
        return CpuSet::new();
    }
    // SAFETY: snprintf-style: a NULL buffer of size 0 asks only for the length; the second call
    // writes at most `buf.len()` bytes including the NUL.
    let text = unsafe {
        let n = (api.bitmap_list_snprintf)(ptr::null_mut(), 0, bitmap);
        if n < 0 {
            return CpuSet::new();
        }
        let mut buf = vec![0u8; n as usize + 1];
        (api.bitmap_list_snprintf)(buf.as_mut_ptr().cast(), buf.len(), bitmap);
        CStr::from_bytes_until_nul(&buf).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    };
    text.parse().unwrap_or_default()
}

fn bus_id(a: &ffi::PcidevAttr) -> PciBusId {
    PciBusId::new(a.domain.into(), a.bus, a.dev, a.func)
}

/// Copies what the model needs out of a loaded topology.
///
/// # Safety
/// `h.topo` must be loaded; the pointers read are hwloc's own and live as long as it.
unsafe fn walk(h: &Handle<'_>) -> Model {
    let mut model = Model::default();
    // SAFETY: (the whole body) every object pointer comes from hwloc_get_obj_by_depth on the
    // loaded topology; `attr` is read as the union member of the object's own type (bridge,
    // pcidev, osdev: hwloc.h `union hwloc_obj_attr_u`); `parent` is null only at the root;
    // `name` and `infos[..infos_count]` are NUL-terminated strings or null (hwloc.h).
    unsafe {
        let mut index = HashMap::new();
        // The levels hold only their own type; checked anyway, since `attr` is read by type.
        let mut pci = objects(h, ffi::DEPTH_BRIDGE);
        pci.extend(objects(h, ffi::DEPTH_PCI_DEVICE));
        pci.retain(|&o| matches!((*o).type_, ffi::OBJ_BRIDGE | ffi::OBJ_PCI_DEVICE));
        for &o in &pci {
            index.insert(o, index.len());
        }
        for &o in &pci {
            let obj = &*o;
            let (kind, attr) = if obj.type_ == ffi::OBJ_BRIDGE {
                let b = &*(obj.attr as *const ffi::BridgeAttr);
                let kind = if b.upstream_type == ffi::BRIDGE_HOST { NodeKind::HostBridge } else { NodeKind::Bridge };
                (kind, &b.upstream)
            } else {
                (NodeKind::Device, &*(obj.attr as *const ffi::PcidevAttr))
            };
            // The locality: the first ancestor that is not I/O (I/O objects have no cpuset), its
            // complete set, as sysfs's local_cpulist counts disallowed and offline CPUs too.
            let mut up = obj.parent;
            while !up.is_null() && (*up).cpuset.is_null() {
                up = (*up).parent;
            }
            let locality = if up.is_null() { CpuSet::new() } else { cpuset(h.api, (*up).complete_cpuset) };
            let host = kind == NodeKind::HostBridge;
            model.nodes.push(PciNode {
                kind,
                bus_id: (!host).then(|| bus_id(attr)),
                parent: index.get(&obj.parent).copied(),
                vendor: if host { 0 } else { attr.vendor_id },
                class: if host { 0 } else { attr.class_id },
                locality,
            });
        }
        for o in objects(h, ffi::DEPTH_OS_DEVICE) {
            let obj = &*o;
            if obj.type_ != ffi::OBJ_OS_DEVICE {
                continue;
            }
            let kind = match (*(obj.attr as *const ffi::OsdevAttr)).type_ {
                ffi::OSDEV_NETWORK => Kind::Network,
                ffi::OSDEV_OPENFABRICS => Kind::OpenFabrics,
                _ => continue,
            };
            // Its PCI device: the nearest PCI device above it; none (a virtual device) leaves it
            // out, as sysfs's route does.
            let mut up = obj.parent;
            while !up.is_null() && (*up).type_ != ffi::OBJ_PCI_DEVICE {
                up = (*up).parent;
            }
            let (Some(&pci), false) = (index.get(&up), obj.name.is_null()) else { continue };
            let name = CStr::from_ptr(obj.name).to_string_lossy().into_owned();
            let (mut active_ports, mut states_known) = (Vec::new(), false);
            for i in 0..obj.infos_count as usize {
                let info = &*obj.infos.add(i);
                if info.name.is_null() || info.value.is_null() {
                    continue;
                }
                let key = CStr::from_ptr(info.name).to_string_lossy();
                let value = CStr::from_ptr(info.value).to_string_lossy();
                if let Some(port) = key.strip_prefix("Port").and_then(|k| k.strip_suffix("State")) {
                    let Ok(port) = port.parse::<u32>() else { continue };
                    states_known = true;
                    // hwloc stores the number from sysfs's "4: ACTIVE".
                    if value.trim() == "4" {
                        active_ports.push(port);
                    }
                }
            }
            active_ports.sort_unstable();
            let active_ports = states_known.then_some(active_ports);
            model.osdevs.push(OsDev { name, kind, pci, active_ports });
        }
    }
    model
}
