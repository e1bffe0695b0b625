//! The UCP context (`ucp_context_h`): the features an application uses, its configuration, and
//! the process-wide resources (transports, memory domains) workers are built on.
use std::collections::BTreeMap;
use std::ops::BitOr;
use std::sync::{Arc, OnceLock};

use crate::config::Config;
use crate::error::{check, Error, Result, Status};
use crate::live::{self, Kind};
use crate::{log, peer_timeout, request, sys, text, version};

/// A set of UCP features (`UCP_FEATURE_*`) a context is created with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Features(u64);

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Features::TAG, "TAG"),
            (Features::STREAM, "STREAM"),
            (Features::AM, "AM"),
            (Features::RMA, "RMA"),
            (Features::WAKEUP, "WAKEUP"),
            (Features::AMO32, "AMO32"),
            (Features::AMO64, "AMO64"),
        ];
        let set: Vec<&str> = names.iter().filter(|(b, _)| self.contains(*b)).map(|(_, n)| *n).collect();
        write!(f, "Features({})", set.join(" | "))
    }
}

impl Features {
    /// Tag matching (`UCP_FEATURE_TAG`).
    pub const TAG: Features = Features(sys::UCP_FEATURE_TAG as u64);
    /// Stream API (`UCP_FEATURE_STREAM`).
    pub const STREAM: Features = Features(sys::UCP_FEATURE_STREAM as u64);
    /// Active messages (`UCP_FEATURE_AM`).
    pub const AM: Features = Features(sys::UCP_FEATURE_AM as u64);
    /// Remote memory access: put/get (`UCP_FEATURE_RMA`).
    pub const RMA: Features = Features(sys::UCP_FEATURE_RMA as u64);
    /// A wakeup file descriptor per worker (`UCP_FEATURE_WAKEUP`), for event-driven progress.
    pub const WAKEUP: Features = Features(sys::UCP_FEATURE_WAKEUP as u64);
    /// 32-bit atomics (`UCP_FEATURE_AMO32`).
    pub const AMO32: Features = Features(sys::UCP_FEATURE_AMO32 as u64);
    /// 64-bit atomics (`UCP_FEATURE_AMO64`).
    pub const AMO64: Features = Features(sys::UCP_FEATURE_AMO64 as u64);
    /// What UCX-Py asks for: tag, stream, AM, RMA and wakeup.
    pub const ALL_MESSAGING: Features = Features(
        (sys::UCP_FEATURE_TAG
            | sys::UCP_FEATURE_STREAM
            | sys::UCP_FEATURE_AM
            | sys::UCP_FEATURE_RMA
            | sys::UCP_FEATURE_WAKEUP) as u64,
    );

    /// Whether every feature in `other` is in `self`.
    pub fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw `UCP_FEATURE_*` bits.
    pub fn bits(self) -> u64 {
        self.0
    }

    /// Features from raw `UCP_FEATURE_*` bits (as UCX-Py's `Feature` enum gives them); bits
    /// that name no feature are dropped.
    pub fn from_bits(bits: u64) -> Features {
        let all = [Features::TAG, Features::STREAM, Features::AM, Features::RMA, Features::WAKEUP]
            .into_iter()
            .chain([Features::AMO32, Features::AMO64])
            .fold(0, |acc, f| acc | f.0);
        Features(bits & all)
    }
}

impl BitOr for Features {
    type Output = Features;
    fn bitor(self, rhs: Features) -> Features {
        Features(self.0 | rhs.0)
    }
}

/// UCX settings this library makes where neither the environment (`UCX_<name>`) nor the
/// builder's options set them, one line each (docs/configuration.md, "UCX settings this
/// library sets by default", says why for each).
pub const LIBRARY_DEFAULTS: &[(&str, &str)] = &[
    // A blocking connect() inside progress froze the caller's thread (an event loop) for as
    // long as the kernel retried a dropped SYN.
    ("TCP_CONN_NB", "y"),
    // UCX's tcp transport moves a message in segments of these sizes (8 KiB and 64 KiB by
    // default); 256 KiB moved 1 MiB messages with peer error handling 4.3x faster on loopback
    // and 1.3x across a pair of network namespaces, 16 MiB 3.4x and 1.4x, at no cost to small
    // messages or to the memory per endpoint (buffers come from a per-worker pool;
    // scripts/sweep_tcp.py).
    ("TCP_TX_SEG_SIZE", "256k"),
    ("TCP_RX_SEG_SIZE", "256k"),
];

/// Every UCX setting (name without `UCX_`, value) this library makes where the user set none:
/// [`LIBRARY_DEFAULTS`], then those that bound how long a silent peer goes unnoticed
/// ([`peer_timeout::ucx_settings`] of `UCXA_PEER_TIMEOUT`, read now; none where it is off).
pub fn library_defaults() -> Vec<(&'static str, String)> {
    let fixed = LIBRARY_DEFAULTS.iter().map(|(name, value)| (*name, value.to_string()));
    fixed.chain(peer_timeout::from_env().into_iter().flat_map(peer_timeout::ucx_settings)).collect()
}

/// How to create a [`Context`]: features, UCX options, and whether the environment wins.
#[derive(Clone, Debug)]
pub struct ContextBuilder {
    features: Features,
    options: Vec<(String, String)>,
    env_takes_precedence: bool,
}

impl Default for ContextBuilder {
    fn default() -> Self {
        ContextBuilder { features: Features::ALL_MESSAGING, options: Vec::new(), env_takes_precedence: false }
    }
}

impl ContextBuilder {
    /// The features to request (default: [`Features::ALL_MESSAGING`]).
    pub fn features(mut self, features: Features) -> Self {
        self.features = features;
        self
    }

    /// Sets UCX option `name` (without the `UCX_` prefix, e.g. `("TLS", "tcp")`).
    pub fn option(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((name.into(), value.into()));
        self
    }

    /// When true, an option that is also set in the environment as `UCX_<name>` keeps the
    /// environment's value; when false (the default), the option given here wins.
    pub fn env_takes_precedence(mut self, yes: bool) -> Self {
        self.env_takes_precedence = yes;
        self
    }

    /// Checks the UCX version and creates the context.
    pub fn build(self) -> Result<Context> {
        version::check()?;
        let mut config = Config::from_env()?;
        // What UCX takes for each setting named in the environment or here, for `setting`:
        // the ucp configuration `config()` prints leaves out the transports' own (`TCP_*`).
        let mut settings: BTreeMap<String, String> =
            std::env::vars().filter_map(|(k, v)| k.strip_prefix("UCX_").map(|name| (name.to_string(), v))).collect();
        for (name, value) in library_defaults() {
            let chosen = settings.contains_key(name) || self.options.iter().any(|(n, _)| n == name);
            if !chosen {
                config.set(name, &value)?;
                settings.insert(name.to_string(), value);
            }
        }
        for (name, value) in &self.options {
            if self.env_takes_precedence && std::env::var_os(format!("UCX_{name}")).is_some() {
                continue;
            }
            config.set(name, value)?;
            settings.insert(name.clone(), value.clone());
        }
        let effective = config.to_map();

        // SAFETY: ucp_params_t is plain C data; zero means "field not set".
        let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_PARAM_FIELD_FEATURES
            | sys::UCP_PARAM_FIELD_REQUEST_SIZE
            | sys::UCP_PARAM_FIELD_REQUEST_INIT
            | sys::UCP_PARAM_FIELD_MT_WORKERS_SHARED) as u64;
        params.features = self.features.bits();
        params.request_size = request::SLOT_SIZE;
        params.request_init = Some(request::init_slot);
        params.mt_workers_shared = 1;

        let mut handle = std::ptr::null_mut();
        // UCX logs why it fails (a bad transport or device name, with the valid ones) and
        // returns only a status: the error carries what it logged.
        let (status, logged) = log::capture(|| {
            // SAFETY: params and config are valid for the call; UCX writes the context handle.
            // ucp_init is a static inline wrapper of ucp_init_version with the headers' version.
            unsafe {
                sys::ucp_init_version(version::HEADERS.0, version::HEADERS.1, &params, config.handle(), &mut handle)
            }
        });
        if let Some(s) = Status::from_raw(status) {
            return Err(match logged.is_empty() {
                true => Error::new("ucp_init", s),
                false => Error::with_detail("ucp_init", s, logged.join("; ")),
            });
        }
        live::created(Kind::Context);
        Ok(Context {
            inner: Arc::new(ContextInner {
                handle,
                features: self.features,
                config: effective,
                settings,
                shared_memory: OnceLock::new(),
            }),
        })
    }
}

/// A UCP context. Cheap to clone; workers keep theirs alive.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    handle: sys::ucp_context_h,
    features: Features,
    config: BTreeMap<String, String>,
    settings: BTreeMap<String, String>,
    /// [`Context::has_shared_memory`], worked out on first use.
    shared_memory: OnceLock<bool>,
}

// SAFETY: the context is created with mt_workers_shared=1 and UCP contexts are thread-safe for
// the calls we make (worker creation, memory mapping, info printing).
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: every worker and memory handle holds a Context clone, so none is left.
        unsafe { sys::ucp_cleanup(self.handle) };
        live::destroyed(Kind::Context);
    }
}

impl Context {
    /// A builder with UCX-Py's features and no options.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }

    /// A context with UCX-Py's features and the environment's configuration.
    pub fn new() -> Result<Context> {
        ContextBuilder::default().build()
    }

    /// The features it was created with.
    pub fn features(&self) -> Features {
        self.inner.features
    }

    /// The effective configuration at creation (names without `UCX_`), as UCX printed it.
    pub fn config(&self) -> &BTreeMap<String, String> {
        &self.inner.config
    }

    /// The value given at creation for UCX setting `name` (without `UCX_`), by the builder's
    /// options, [`library_defaults`] or the environment, whichever UCX took; `None` where
    /// none set it (UCX's default applies). Covers the transports' settings (`TCP_AF_PRIO`,
    /// `TCP_CONN_NB`), which [`Context::config`] does not list.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.inner.settings.get(name).map(String::as_str)
    }

    /// UCX's description of the context: transports, memory domains (`ucp_context_print_info`).
    pub fn info(&self) -> String {
        text::capture(|file| {
            // SAFETY: the context is live and file is an open stream.
            unsafe { sys::ucp_context_print_info(self.inner.handle, file) }
        })
    }

    /// The memory types this context's transports reach (`ucp_context_query`), by UCX's names
    /// (`host`, `cuda`, `cuda-managed`, `rocm`, ...): `cuda` only where a CUDA transport loaded.
    pub fn memory_types(&self) -> Result<Vec<&'static str>> {
        // SAFETY: ucp_context_attr_t is plain C data; zero means "no field asked for".
        let mut attr: sys::ucp_context_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_ATTR_FIELD_MEMORY_TYPES as u64;
        // SAFETY: the context is live; UCX writes only the fields asked for into `attr`.
        check("ucp_context_query", unsafe { sys::ucp_context_query(self.inner.handle, &mut attr) })?;
        Ok(MEMORY_TYPE_NAMES
            .iter()
            .enumerate()
            .filter(|(bit, _)| attr.memory_types & (1u64 << bit) != 0)
            .map(|(_, name)| *name)
            .collect())
    }

    /// The `transport/device` resources the context opened (`tcp/lo`, `sysv/memory`,
    /// `cuda_copy/cuda`, ...), as [`Context::info`] lists them.
    pub fn resources(&self) -> Vec<String> {
        transport_resources(&self.info()).into_iter().map(str::to_string).collect()
    }

    /// Whether one of UCX's shared-memory transports (`posix`, `sysv`, `xpmem`) is among the
    /// context's resources (not where `UCX_TLS` leaves them out).
    pub fn has_shared_memory(&self) -> bool {
        *self.inner.shared_memory.get_or_init(|| {
            self.resources().iter().any(|r| matches!(r.split('/').next(), Some("posix" | "sysv" | "xpmem")))
        })
    }

    /// Why a connection to a listener found its peer unreachable, where this context is the
    /// cause: none of its transports can carry a client-server connection. UCX makes those
    /// over tcp or an InfiniBand/RoCE transport, not over shared memory or CUDA transports
    /// alone (even between processes on one host), so `UCX_TLS=sm`, `UCX_TLS=^tcp` or a
    /// `UCX_NET_DEVICES` naming no such device leave none. `None` where the cause lies
    /// elsewhere. For the error of a failed connect.
    pub fn unreachable_listener_hint(&self) -> Option<String> {
        let info = self.info();
        let resources = transport_resources(&info);
        if resources.iter().any(|r| reaches_listeners(r)) {
            return None;
        }
        let setting = |name: &str| self.inner.config.get(name).map_or("", String::as_str).to_string();
        Some(format!(
            "this context has no transport for a connection to a listener, which UCX makes over tcp \
             or an InfiniBand/RoCE transport (rc, dc, ud); it has {}, from UCX_TLS={} and \
             UCX_NET_DEVICES={}",
            if resources.is_empty() { "none".to_string() } else { resources.join(", ") },
            setting("TLS"),
            setting("NET_DEVICES"),
        ))
    }

    /// An opaque identity of the UCX context (its handle, as UCX-Py showed it).
    pub fn id(&self) -> usize {
        self.handle() as usize
    }

    pub(crate) fn handle(&self) -> sys::ucp_context_h {
        self.inner.handle
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("handle", &self.inner.handle).field("features", &self.inner.features).finish()
    }
}

/// UCX's names of its memory types (`ucs_memory_type_names`), indexed by `ucs_memory_type_t`.
const MEMORY_TYPE_NAMES: [&str; 9] =
    ["host", "cuda", "cuda-managed", "rocm", "rocm-managed", "rdma", "ze-host", "ze-device", "ze-managed"];

/// The `transport/device` names of the resources `ucp_context_print_info` lists
/// (`#      resource 2  :  md 1  dev 2  flags -- tcp/lo`).
pub(crate) fn transport_resources(info: &str) -> Vec<&str> {
    info.lines()
        .filter(|l| l.trim_start_matches(['#', ' ']).starts_with("resource"))
        .filter_map(|l| l.rsplit_once("-- ").map(|(_, r)| r.trim()))
        .collect()
}

/// Whether a `transport/device` resource can carry a client-server connection.
fn reaches_listeners(resource: &str) -> bool {
    let tl = resource.split('/').next().unwrap_or("");
    tl == "tcp" || ["rc", "dc", "ud"].iter().any(|p| tl.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resources_that_carry_listener_connections_are_told_apart() {
        let info = "#\n# UCP context\n#     component 1  :  tcp\n#            md 1  :  component 1  tcp \n\
                    #      resource 0  :  md 0  dev 0  flags -- self/memory\n\
                    #      resource 3  :  md 2  dev 0  flags -- sysv/memory\n\
                    #      resource 5  :  md 4  dev 0  flags -- cma/memory\n";
        assert_eq!(transport_resources(info), vec!["self/memory", "sysv/memory", "cma/memory"]);
        assert!(!transport_resources(info).iter().any(|r| reaches_listeners(r)));
        for r in ["tcp/lo", "rc_mlx5/mlx5_0:1", "dc_mlx5/mlx5_0:1", "ud_verbs/mlx5_0:1"] {
            assert!(reaches_listeners(r), "{r}");
        }
        for r in ["posix/memory", "cuda_ipc/cuda", "cuda_copy/cuda", "self/memory"] {
            assert!(!reaches_listeners(r), "{r}");
        }
    }
}
