//! PCI bus ids (`domain:bus:device.function`): parsing what users, CUDA, NVML, hwloc and sysfs
//! write, and one canonical spelling (`0000:3b:00.0`, as sysfs and hwloc print it).

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// A PCI function's address. Ordered as the numbers are (domain, bus, device, function), which is
/// the order `CUDA_DEVICE_ORDER=PCI_BUS_ID` gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciBusId {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciBusId {
    pub const fn new(domain: u32, bus: u8, device: u8, function: u8) -> Self {
        PciBusId { domain, bus, device, function }
    }
}

impl fmt::Display for PciBusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

fn hex(part: &str, max: u32, input: &str, what: &'static str) -> Result<u32, Error> {
    let bad = || Error::BadPciBusId { input: input.to_owned(), reason: what };
    if part.is_empty() || part.len() > 8 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let value = u32::from_str_radix(part, 16).map_err(|_| bad())?;
    if value > max {
        return Err(bad());
    }
    Ok(value)
}

impl FromStr for PciBusId {
    type Err = Error;

    /// Accepts `[domain:]bus:device[.function]`, hex, either case; the domain may have up to 8
    /// digits (NVML writes `00000000:3B:00.0`); a missing domain or function is 0, as with
    /// `lspci -s`.
    fn from_str(input: &str) -> Result<Self, Error> {
        let s = input.trim();
        let (rest, function) = match s.rsplit_once('.') {
            Some((rest, f)) => (rest, hex(f, 7, input, "the function must be 0-7")?),
            None => (s, 0),
        };
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, dev] => (hex(d, u32::MAX, input, "the domain must be hex, at most 8 digits")?, *b, *dev),
            [b, dev] => (0, *b, *dev),
            _ => {
                return Err(Error::BadPciBusId {
                    input: input.to_owned(),
                    reason: "expected [domain:]bus:device[.function]",
                })
            }
        };
        let bus = hex(bus, 0xff, input, "the bus must be hex 00-ff")? as u8;
        let device = hex(device, 0x1f, input, "the device must be hex 00-1f")? as u8;
        Ok(PciBusId { domain, bus, device, function: function as u8 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_tools_print() {
        let want = PciBusId::new(0, 0x3b, 0, 0);
        for s in ["0000:3b:00.0", "00000000:3B:00.0", "3b:00.0", "3b:00", " 0000:3b:00.0\n"] {
            assert_eq!(s.parse::<PciBusId>().unwrap(), want, "{s}");
        }
        assert_eq!("0001:02:1f.7".parse::<PciBusId>().unwrap(), PciBusId::new(1, 2, 0x1f, 7));
        assert_eq!(want.to_string(), "0000:3b:00.0");
    }

    #[test]
    fn rejects_bad_ids_naming_them() {
        for s in ["", "3b", "0000:3b:00.8", "0000:3b:20.0", "0000:13b:00.0", "x:3b:00.0", "1:2:3:4"] {
            let err = s.parse::<PciBusId>().unwrap_err();
            assert!(matches!(err, Error::BadPciBusId { .. }), "{s}: {err}");
            assert!(err.to_string().contains(&format!("{s:?}")), "{err}");
        }
    }

    #[test]
    fn orders_as_cuda_pci_bus_id_order() {
        let mut ids: Vec<PciBusId> = ["0000:b7:00.0", "0000:07:00.0", "0001:01:00.0", "0000:0f:00.0"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        ids.sort();
        let got: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        assert_eq!(got, ["0000:07:00.0", "0000:0f:00.0", "0000:b7:00.0", "0001:01:00.0"]);
    }
}
