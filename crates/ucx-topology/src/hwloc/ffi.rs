//! hwloc 2.x's C ABI (`libhwloc.so.15`), declared by hand and opened at run time: the few
//! functions this crate calls and the structs it reads. Every layout here is hwloc 2.9's
//! `/usr/include/hwloc.h` (Debian `libhwloc-dev` 2.9.0), which keeps it for the whole 2.x ABI
//! (soname 15); the test `layout_matches_hwloc_h` below compiles a C program against that
//! header, when it and a C compiler are present, and compares every offset and size.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

/// The soname of hwloc's 2.x ABI; 1.x (`.so.5`) and a future 3.x have other layouts.
pub const SONAME: &str = "libhwloc.so.15";

// hwloc.h `hwloc_obj_type_t` (enum, declaration order, line 181 ff.).
pub const OBJ_BRIDGE: c_int = 14;
pub const OBJ_PCI_DEVICE: c_int = 15;
pub const OBJ_OS_DEVICE: c_int = 16;
// hwloc.h `hwloc_obj_bridge_type_t`.
pub const BRIDGE_HOST: c_int = 0;
// hwloc.h `hwloc_obj_osdev_type_t`.
pub const OSDEV_NETWORK: c_int = 2;
pub const OSDEV_OPENFABRICS: c_int = 3;
// hwloc.h `hwloc_get_type_depth_e`: the virtual depths of the I/O levels.
pub const DEPTH_BRIDGE: c_int = -4;
pub const DEPTH_PCI_DEVICE: c_int = -5;
pub const DEPTH_OS_DEVICE: c_int = -6;
// hwloc.h `hwloc_type_filter_e`.
pub const TYPE_FILTER_KEEP_ALL: c_int = 0;

pub type Topology = *mut c_void;
pub type Bitmap = *mut c_void;

/// `struct hwloc_obj` (hwloc.h line 396), every field in order, because the ones read come
/// after the others.
#[repr(C)]
pub struct Obj {
    pub type_: c_int,
    pub subtype: *mut c_char,
    pub os_index: c_uint,
    pub name: *mut c_char,
    pub total_memory: u64,
    pub attr: *mut c_void,
    pub depth: c_int,
    pub logical_index: c_uint,
    pub next_cousin: *mut Obj,
    pub prev_cousin: *mut Obj,
    pub parent: *mut Obj,
    pub sibling_rank: c_uint,
    pub next_sibling: *mut Obj,
    pub prev_sibling: *mut Obj,
    pub arity: c_uint,
    pub children: *mut *mut Obj,
    pub first_child: *mut Obj,
    pub last_child: *mut Obj,
    pub symmetric_subtree: c_int,
    pub memory_arity: c_uint,
    pub memory_first_child: *mut Obj,
    pub io_arity: c_uint,
    pub io_first_child: *mut Obj,
    pub misc_arity: c_uint,
    pub misc_first_child: *mut Obj,
    pub cpuset: Bitmap,
    pub complete_cpuset: Bitmap,
    pub nodeset: Bitmap,
    pub complete_nodeset: Bitmap,
    pub infos: *mut Info,
    pub infos_count: c_uint,
    pub userdata: *mut c_void,
    pub gp_index: u64,
}

/// `struct hwloc_info_s` (hwloc.h line 674).
#[repr(C)]
pub struct Info {
    pub name: *mut c_char,
    pub value: *mut c_char,
}

/// `struct hwloc_pcidev_attr_s` (hwloc.h line 633), the default 16-bit domain
/// (`HWLOC_HAVE_32BITS_PCI_DOMAIN` unset, as Debian builds it).
#[repr(C)]
pub struct PcidevAttr {
    pub domain: u16,
    pub bus: u8,
    pub dev: u8,
    pub func: u8,
    pub class_id: u16,
    pub vendor_id: u16,
    pub device_id: u16,
    pub subvendor_id: u16,
    pub subdevice_id: u16,
    pub revision: u8,
    pub linkspeed: f32,
}

/// `struct hwloc_bridge_attr_s` (hwloc.h line 646); the upstream union has one member.
#[repr(C)]
pub struct BridgeAttr {
    pub upstream: PcidevAttr,
    pub upstream_type: c_int,
    pub downstream_domain: u16,
    pub downstream_secondary_bus: u8,
    pub downstream_subordinate_bus: u8,
    pub downstream_type: c_int,
    pub depth: c_uint,
}

/// `struct hwloc_osdev_attr_s` (hwloc.h line 665).
#[repr(C)]
pub struct OsdevAttr {
    pub type_: c_int,
}

/// The functions used, resolved once from the library, which stays loaded for the process's
/// life (it lives in a `static`), so the pointers stay valid.
pub struct Api {
    _lib: Library,
    pub get_api_version: unsafe extern "C" fn() -> c_uint,
    pub topology_init: unsafe extern "C" fn(*mut Topology) -> c_int,
    pub topology_destroy: unsafe extern "C" fn(Topology),
    pub topology_set_io_types_filter: unsafe extern "C" fn(Topology, c_int) -> c_int,
    pub topology_set_xml: unsafe extern "C" fn(Topology, *const c_char) -> c_int,
    pub topology_load: unsafe extern "C" fn(Topology) -> c_int,
    pub get_nbobjs_by_depth: unsafe extern "C" fn(Topology, c_int) -> c_uint,
    pub get_obj_by_depth: unsafe extern "C" fn(Topology, c_int, c_uint) -> *mut Obj,
    pub bitmap_list_snprintf: unsafe extern "C" fn(*mut c_char, usize, Bitmap) -> c_int,
}

impl Api {
    /// Opens `name` (a soname searched as `dlopen` does, or a path) and resolves the functions.
    pub fn open(name: &str) -> Result<Api, String> {
        // RTLD_GLOBAL, as if linked: hwloc's plugins (the libxml2 XML parser, PCI discovery)
        // resolve their hwloc symbols from the global scope; loaded locally they fail to load
        // and hwloc silently falls back to its minimal XML parser and fewer devices.
        // SAFETY: loading libhwloc runs its initialisers, which only set up hwloc's own state
        // (no process-wide side effects beyond what any dlopen'ed library does).
        let lib = unsafe { Library::open(Some(name), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("cannot open {name}: {e}"))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's type is its prototype in hwloc.h (each field of `Api`
                // is declared with it); the pointer is copied out and `_lib` keeps it valid.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{name} lacks {}: {e}", $name))?
            };
        }
        let api = Api {
            get_api_version: sym!("hwloc_get_api_version"),
            topology_init: sym!("hwloc_topology_init"),
            topology_destroy: sym!("hwloc_topology_destroy"),
            topology_set_io_types_filter: sym!("hwloc_topology_set_io_types_filter"),
            topology_set_xml: sym!("hwloc_topology_set_xml"),
            topology_load: sym!("hwloc_topology_load"),
            get_nbobjs_by_depth: sym!("hwloc_get_nbobjs_by_depth"),
            get_obj_by_depth: sym!("hwloc_get_obj_by_depth"),
            bitmap_list_snprintf: sym!("hwloc_bitmap_list_snprintf"),
            _lib: lib,
        };
        // SAFETY: hwloc_get_api_version takes nothing and returns a number.
        let version = unsafe { (api.get_api_version)() };
        if version >> 16 != 2 {
            return Err(format!("{name} has API version {version:#x}; the structs read here are hwloc 2.x's"));
        }
        Ok(api)
    }
}

/// The system's libhwloc, opened on first use; the reason it could not be, after that.
pub fn system() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| Api::open(SONAME)).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::path::Path;
    use std::process::Command;

    /// Offsets and sizes of everything read, as Rust lays it out, one `name value` a line; the C
    /// program below prints the same names from hwloc.h.
    fn rust_layout() -> String {
        let mut s = String::new();
        let mut put = |name: &str, v: usize| s.push_str(&format!("{name} {v}\n"));
        put("obj.size", size_of::<Obj>());
        put("obj.type", offset_of!(Obj, type_));
        put("obj.name", offset_of!(Obj, name));
        put("obj.attr", offset_of!(Obj, attr));
        put("obj.depth", offset_of!(Obj, depth));
        put("obj.parent", offset_of!(Obj, parent));
        put("obj.io_first_child", offset_of!(Obj, io_first_child));
        put("obj.cpuset", offset_of!(Obj, cpuset));
        put("obj.complete_cpuset", offset_of!(Obj, complete_cpuset));
        put("obj.infos", offset_of!(Obj, infos));
        put("obj.infos_count", offset_of!(Obj, infos_count));
        put("obj.gp_index", offset_of!(Obj, gp_index));
        put("info.size", size_of::<Info>());
        put("info.value", offset_of!(Info, value));
        put("pcidev.size", size_of::<PcidevAttr>());
        put("pcidev.domain", offset_of!(PcidevAttr, domain));
        put("pcidev.bus", offset_of!(PcidevAttr, bus));
        put("pcidev.dev", offset_of!(PcidevAttr, dev));
        put("pcidev.func", offset_of!(PcidevAttr, func));
        put("pcidev.class_id", offset_of!(PcidevAttr, class_id));
        put("pcidev.vendor_id", offset_of!(PcidevAttr, vendor_id));
        put("pcidev.linkspeed", offset_of!(PcidevAttr, linkspeed));
        put("bridge.size", size_of::<BridgeAttr>());
        put("bridge.upstream_type", offset_of!(BridgeAttr, upstream_type));
        put("bridge.downstream_type", offset_of!(BridgeAttr, downstream_type));
        put("bridge.depth", offset_of!(BridgeAttr, depth));
        put("osdev.type", offset_of!(OsdevAttr, type_));
        put("OBJ_BRIDGE", OBJ_BRIDGE as usize);
        put("OBJ_PCI_DEVICE", OBJ_PCI_DEVICE as usize);
        put("OBJ_OS_DEVICE", OBJ_OS_DEVICE as usize);
        put("BRIDGE_HOST", BRIDGE_HOST as usize);
        put("OSDEV_NETWORK", OSDEV_NETWORK as usize);
        put("OSDEV_OPENFABRICS", OSDEV_OPENFABRICS as usize);
        put("DEPTH_BRIDGE", (-DEPTH_BRIDGE) as usize);
        put("DEPTH_PCI_DEVICE", (-DEPTH_PCI_DEVICE) as usize);
        put("DEPTH_OS_DEVICE", (-DEPTH_OS_DEVICE) as usize);
        put("TYPE_FILTER_KEEP_ALL", TYPE_FILTER_KEEP_ALL as usize);
        s
    }

    const C_PROGRAM: &str = r#"
#include <hwloc.h>
#include <stddef.h>
#include <stdio.h>
#define P(n, v) printf("%s %lu\n", n, (unsigned long)(v))
int main(void) {
  P("obj.size", sizeof(struct hwloc_obj));
  P("obj.type", offsetof(struct hwloc_obj, type));
  P("obj.name", offsetof(struct hwloc_obj, name));
  P("obj.attr", offsetof(struct hwloc_obj, attr));
  P("obj.depth", offsetof(struct hwloc_obj, depth));
  P("obj.parent", offsetof(struct hwloc_obj, parent));
  P("obj.io_first_child", offsetof(struct hwloc_obj, io_first_child));
  P("obj.cpuset", offsetof(struct hwloc_obj, cpuset));
  P("obj.complete_cpuset", offsetof(struct hwloc_obj, complete_cpuset));
  P("obj.infos", offsetof(struct hwloc_obj, infos));
  P("obj.infos_count", offsetof(struct hwloc_obj, infos_count));
  P("obj.gp_index", offsetof(struct hwloc_obj, gp_index));
  P("info.size", sizeof(struct hwloc_info_s));
  P("info.value", offsetof(struct hwloc_info_s, value));
  P("pcidev.size", sizeof(struct hwloc_pcidev_attr_s));
  P("pcidev.domain", offsetof(struct hwloc_pcidev_attr_s, domain));
  P("pcidev.bus", offsetof(struct hwloc_pcidev_attr_s, bus));
  P("pcidev.dev", offsetof(struct hwloc_pcidev_attr_s, dev));
  P("pcidev.func", offsetof(struct hwloc_pcidev_attr_s, func));
  P("pcidev.class_id", offsetof(struct hwloc_pcidev_attr_s, class_id));
  P("pcidev.vendor_id", offsetof(struct hwloc_pcidev_attr_s, vendor_id));
  P("pcidev.linkspeed", offsetof(struct hwloc_pcidev_attr_s, linkspeed));
  P("bridge.size", sizeof(struct hwloc_bridge_attr_s));
  P("bridge.upstream_type", offsetof(struct hwloc_bridge_attr_s, upstream_type));
  P("bridge.downstream_type", offsetof(struct hwloc_bridge_attr_s, downstream_type));
  P("bridge.depth", offsetof(struct hwloc_bridge_attr_s, depth));
  P("osdev.type", offsetof(struct hwloc_osdev_attr_s, type));
  P("OBJ_BRIDGE", HWLOC_OBJ_BRIDGE);
  P("OBJ_PCI_DEVICE", HWLOC_OBJ_PCI_DEVICE);
  P("OBJ_OS_DEVICE", HWLOC_OBJ_OS_DEVICE);
  P("BRIDGE_HOST", HWLOC_OBJ_BRIDGE_HOST);
  P("OSDEV_NETWORK", HWLOC_OBJ_OSDEV_NETWORK);
  P("OSDEV_OPENFABRICS", HWLOC_OBJ_OSDEV_OPENFABRICS);
  P("DEPTH_BRIDGE", -HWLOC_TYPE_DEPTH_BRIDGE);
  P("DEPTH_PCI_DEVICE", -HWLOC_TYPE_DEPTH_PCI_DEVICE);
  P("DEPTH_OS_DEVICE", -HWLOC_TYPE_DEPTH_OS_DEVICE);
  P("TYPE_FILTER_KEEP_ALL", HWLOC_TYPE_FILTER_KEEP_ALL);
  return 0;
}
"#;

    #[test]
    fn layout_matches_hwloc_h() {
        if !Path::new("/usr/include/hwloc.h").exists() {
            println!("skipped: /usr/include/hwloc.h is absent (Debian libhwloc-dev)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("ucx-topology-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
        std::fs::write(&src, C_PROGRAM).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        match Command::new(&cc).arg(&src).arg("-o").arg(&exe).status() {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("{cc} could not compile against hwloc.h: {s}"),
            Err(e) => {
                println!("skipped: no C compiler ({cc}: {e})");
                return;
            }
        }
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(String::from_utf8(out.stdout).unwrap(), rust_layout());
    }
}
