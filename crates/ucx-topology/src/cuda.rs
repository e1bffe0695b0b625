//! CUDA device index → PCI bus id, which is what the topology knows GPUs by.
//!
//! With the system's topology and a working CUDA driver (`libcuda.so.1`, opened at run time),
//! CUDA itself is asked (`cuDeviceGetPCIBusId`), so the answer is CUDA's by construction, in
//! whatever `CUDA_DEVICE_ORDER` it uses. Otherwise (no driver, no GPU, or a topology from XML,
//! whose GPUs are not this machine's) the index is resolved as CUDA would with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`: the topology's NVIDIA GPUs sorted by bus id, filtered and
//! reordered by `CUDA_VISIBLE_DEVICES`.

use std::ffi::{c_char, c_int, CStr};

use crate::{Error, PciBusId};

/// Applies `CUDA_VISIBLE_DEVICES` (`None`: unset) to the GPUs in PCI order. As CUDA does, the
/// list ends at the first entry that is not a valid, new index (`"0,2,-1,3"` is `0,2`), and an
/// empty value hides every GPU. UUID entries (`GPU-…`, `MIG-…`) need NVML to resolve and are
/// refused with an error rather than guessed.
pub(crate) fn visible(env: Option<&str>, gpus: &[PciBusId]) -> Result<Vec<PciBusId>, Error> {
    let Some(value) = env else { return Ok(gpus.to_vec()) };
    let mut out = Vec::new();
    let mut used = Vec::new();
    for entry in value.split(',').map(str::trim) {
        if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            return Err(Error::BadCudaVisibleDevices {
                value: value.to_owned(),
                reason: "GPU UUIDs cannot be resolved without CUDA; use indices",
            });
        }
        match entry.parse::<usize>() {
            Ok(i) if i < gpus.len() && !used.contains(&i) => {
                used.push(i);
                out.push(gpus[i]);
            }
            _ => break,
        }
    }
    Ok(out)
}

type CuInit = unsafe extern "C" fn(u32) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

/// CUDA's own answer for device `index`: `None` when CUDA cannot answer at all (no driver, no
/// device), `Some(Err)` for an index beyond CUDA's devices.
pub(crate) fn ask_cuda(index: u32) -> Option<Result<PciBusId, Error>> {
    // SAFETY: loading the driver library runs only its own initialisers.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") }.ok()?;
    // SAFETY: each symbol's type is its prototype in CUDA's cuda.h (CUresult is an int enum,
    // CUdevice an int); `lib` outlives every call below. The library is leaked afterwards:
    // unloading a CUDA driver that was initialised is not supported.
    let result = unsafe {
        let init: libloading::Symbol<CuInit> = lib.get(b"cuInit\0").ok()?;
        let count_fn: libloading::Symbol<CuDeviceGetCount> = lib.get(b"cuDeviceGetCount\0").ok()?;
        let get: libloading::Symbol<CuDeviceGet> = lib.get(b"cuDeviceGet\0").ok()?;
        let bus: libloading::Symbol<CuDeviceGetPciBusId> = lib.get(b"cuDeviceGetPCIBusId\0").ok()?;
        if init(0) != 0 {
            return None;
        }
        let mut count: c_int = 0;
        if count_fn(&mut count) != 0 || count <= 0 {
            return None;
        }
        if index >= count as u32 {
            Some(Err(Error::UnknownCudaDevice { index, visible: count as usize }))
        } else {
            let mut dev: c_int = 0;
            let mut buf = [0 as c_char; 32];
            if get(&mut dev, index as c_int) != 0 || bus(buf.as_mut_ptr(), buf.len() as c_int, dev) != 0 {
                return None;
            }
            let text = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            Some(text.parse())
        }
    };
    std::mem::forget(lib);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Vec<PciBusId> {
        ["07:00.0", "0f:00.0", "47:00.0", "4e:00.0"].iter().map(|s| s.parse().unwrap()).collect()
    }

    fn names(v: Vec<PciBusId>) -> Vec<String> {
        v.iter().map(|g| g.to_string()[5..7].to_owned()).collect()
    }

    #[test]
    fn unset_is_pci_order() {
        assert_eq!(names(visible(None, &gpus()).unwrap()), ["07", "0f", "47", "4e"]);
    }

    #[test]
    fn reorders_and_filters() {
        assert_eq!(names(visible(Some("3,0"), &gpus()).unwrap()), ["4e", "07"]);
        assert_eq!(names(visible(Some(" 2 , 1 "), &gpus()).unwrap()), ["47", "0f"]);
    }

    #[test]
    fn stops_at_the_first_invalid_entry_as_cuda_does() {
        assert_eq!(names(visible(Some("1,-1,3"), &gpus()).unwrap()), ["0f"]);
        assert_eq!(names(visible(Some("1,9,3"), &gpus()).unwrap()), ["0f"]);
        assert_eq!(names(visible(Some("1,1,3"), &gpus()).unwrap()), ["0f"]);
        assert!(visible(Some(""), &gpus()).unwrap().is_empty());
    }

    #[test]
    fn uuids_are_refused_with_the_value_named() {
        let err = visible(Some("GPU-5c2a1f6e-0000"), &gpus()).unwrap_err();
        assert!(err.to_string().contains("GPU-5c2a1f6e-0000"), "{err}");
    }
}
