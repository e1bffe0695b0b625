//! UCX configuration: read from the environment (`UCX_*`), modified by name, and printed back
//! as the name -> value map UCX itself reports (`ucp_config_print`).
use std::collections::BTreeMap;
use std::ffi::CString;

use crate::error::{check, Error, Result, Status};
use crate::{sys, text};

/// A UCP configuration (`ucp_config_t`): the environment's `UCX_*` settings plus any changes.
pub struct Config {
    handle: *mut sys::ucp_config_t,
}

// SAFETY: a ucp_config_t is a plain heap object with no thread affinity; we never share it
// between threads without &mut for changes.
unsafe impl Send for Config {}

impl Config {
    /// Reads the configuration from the environment (`ucp_config_read`).
    pub fn from_env() -> Result<Config> {
        crate::library::load()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: NULL prefix and file mean "the defaults plus UCX_* from the environment";
        // UCX writes the new config into `handle`.
        check("ucp_config_read", unsafe { sys::ucp_config_read(std::ptr::null(), std::ptr::null(), &mut handle) })?;
        Ok(Config { handle })
    }

    /// Sets option `name` (without the `UCX_` prefix, e.g. `"TLS"`) to `value`. A value UCX
    /// does not accept is an error that names both; so is an unknown name with UCX 1.22 (UCX
    /// 1.18 accepts unknown names silently, keeping them for transports).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let (Ok(c_name), Ok(c_value)) = (CString::new(name), CString::new(value)) else {
            return Err(Error::with_detail(
                "ucp_config_modify",
                Status::InvalidParam,
                format!("option names and values cannot contain NUL: {name:?}={value:?}"),
            ));
        };
        // SAFETY: handle is a live config; both strings are NUL-terminated and outlive the call.
        let status = unsafe { sys::ucp_config_modify(self.handle, c_name.as_ptr(), c_value.as_ptr()) };
        let Some(status) = Status::from_raw(status) else { return Ok(()) };
        // UCX answers "invalid parameter" for unknown names and bad values alike; tell them apart
        // by whether UCX lists the name (hidden options included).
        let (status, what) = if self.names().iter().any(|n| n == name) {
            (status, "invalid value")
        } else {
            (Status::NoElem, "no such option (or a transport option with an invalid value)")
        };
        let hint = if name.starts_with("UCX_") { " (give names without the UCX_ prefix)" } else { "" };
        Err(Error::with_detail("ucp_config_modify", status, format!("{what}: {name}={value}{hint}")))
    }

    /// Every option name UCX knows at this level, hidden ones included (without `UCX_`).
    fn names(&self) -> Vec<String> {
        let text = text::capture(|file| {
            // SAFETY: handle is live; file is a valid open stream for the duration of the call.
            unsafe {
                sys::ucp_config_print(
                    self.handle,
                    file,
                    std::ptr::null(),
                    sys::UCS_CONFIG_PRINT_CONFIG | sys::UCS_CONFIG_PRINT_HIDDEN,
                )
            }
        });
        parse_printed(&text).into_keys().collect()
    }

    /// The full configuration as UCX prints it: names without the `UCX_` prefix, values as
    /// UCX spells them (e.g. `"TLS" -> "all"`).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        parse_printed(&self.print())
    }

    /// UCX's own text for the configuration (`UCX_NAME=value` lines).
    pub fn print(&self) -> String {
        text::capture(|file| {
            // SAFETY: handle is live; file is a valid open stream for the duration of the call.
            unsafe { sys::ucp_config_print(self.handle, file, std::ptr::null(), sys::UCS_CONFIG_PRINT_CONFIG) }
        })
    }

    pub(crate) fn handle(&self) -> *const sys::ucp_config_t {
        self.handle
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: handle came from ucp_config_read and is released exactly once.
        unsafe { sys::ucp_config_release(self.handle) };
    }
}

/// Parses `UCX_NAME=value` lines; other lines (comments, headers) are skipped.
fn parse_printed(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("UCX_"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ucx_print_format() {
        let m = parse_printed("# comment\nUCX_TLS=all\nUCX_NET_DEVICES=lo,eth0\nUCX_EMPTY=\n");
        assert_eq!(m["TLS"], "all");
        assert_eq!(m["NET_DEVICES"], "lo,eth0");
        assert_eq!(m["EMPTY"], "");
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn set_and_read_back() {
        let mut c = Config::from_env().unwrap();
        c.set("TLS", "tcp,self").unwrap();
        assert_eq!(c.to_map()["TLS"], "tcp,self");
    }

    #[test]
    fn unknown_name_and_bad_value_are_named() {
        let mut c = Config::from_env().unwrap();
        let e = c.set("RNDV_THRESH", "not-a-size").unwrap_err();
        assert!(e.to_string().contains("RNDV_THRESH=not-a-size"), "{e}");
        // UCX 1.18 keeps unknown names for transports without complaint; 1.22 rejects them.
        if crate::version::runtime().unwrap() >= (1, 22, 0) {
            let e = c.set("NO_SUCH_OPTION_X", "1").unwrap_err();
            assert_eq!(e.status(), Status::NoElem, "{e}");
            assert!(e.to_string().contains("NO_SUCH_OPTION_X=1"), "{e}");
            let e = c.set("UCX_TLS", "tcp").unwrap_err();
            assert!(e.to_string().contains("without the UCX_ prefix"), "{e}");
        }
    }
}
