//! `Context`: a UCX context (`ucp_context_h`) with UCX-Py's options and features, its
//! effective configuration, and whether CUDA memory can actually be moved.
use std::collections::{BTreeMap, HashMap};

use pyo3::prelude::*;
use ucx_core::{Config, Features, Status};

use crate::errors::{self, Kind};

/// A UCX context. `options` are UCX option names without the `UCX_` prefix; `features` the
/// `UCP_FEATURE_*` bits (default: tag, stream, active messages, RMA, wakeup).
#[pyclass(frozen, weakref, module = "ucp._ucx_async")]
pub(crate) struct Context {
    pub(crate) inner: ucx_core::Context,
    cuda: bool,
}

#[pymethods]
impl Context {
    #[new]
    #[pyo3(signature = (options = None, features = None))]
    fn new(py: Python<'_>, options: Option<HashMap<String, String>>, features: Option<u64>) -> PyResult<Context> {
        let options = options.unwrap_or_default();
        // Try each option on a scratch configuration first, for UCX-Py's error messages.
        let mut scratch = Config::from_env()
            .map_err(|e| errors::new(py, Kind::ConfigError, format!("Couldn't read the UCX options: {e}")))?;
        let mut builder = ucx_core::Context::builder();
        for (k, v) in &options {
            if let Err(e) = scratch.set(k, v) {
                let msg = if e.status() == Status::NoElem {
                    format!("Option {k} doesn't exist")
                } else {
                    format!("Couldn't set option {k} to {v}: {}", e.status())
                };
                return Err(errors::new(py, Kind::ConfigError, msg));
            }
            builder = builder.option(k.clone(), v.clone());
        }
        if let Some(bits) = features {
            builder = builder.features(Features::from_bits(bits));
        }
        let inner = py.allow_threads(|| builder.build()).map_err(|e| errors::from_core(py, &e))?;
        let cuda = cuda_loaded(&inner.info());
        Ok(Context { inner, cuda })
    }

    /// The effective configuration (names without `UCX_`, values as UCX prints them).
    fn config(&self) -> BTreeMap<String, String> {
        self.inner.config().clone()
    }

    /// `ucp_context_print_info`.
    fn info(&self) -> String {
        self.inner.info()
    }

    /// The `ucp_context_h`, as an int.
    #[getter]
    fn handle(&self) -> usize {
        self.inner.id()
    }

    /// The `UCP_FEATURE_*` bits the context has.
    #[getter]
    fn features(&self) -> u64 {
        self.inner.features().bits()
    }

    /// Whether UCX loaded a CUDA transport, i.e. can move device memory (not a guess from
    /// `UCX_TLS` as in UCX-Py).
    #[getter]
    pub(crate) fn cuda_support(&self) -> bool {
        self.cuda
    }
}

/// Whether the context's resources include a CUDA memory domain.
fn cuda_loaded(info: &str) -> bool {
    info.lines().any(|l| l.starts_with('#') && l.contains("md") && l.contains("cuda"))
}

/// UCX's configuration from the environment, without creating a context (UCX-Py's
/// `get_current_options`).
/// ucx-core's `library_defaults()`: the UCX settings (names without `UCX_`) every context of
/// this library gets where the user set none (`LIBRARY_DEFAULTS`, and what `UCXA_PEER_TIMEOUT`
/// becomes), for `import ucp` to show in the environment.
#[pyfunction]
pub(crate) fn library_defaults() -> Vec<(&'static str, String)> {
    ucx_core::library_defaults()
}

#[pyfunction]
pub(crate) fn current_options(py: Python<'_>) -> PyResult<BTreeMap<String, String>> {
    Config::from_env()
        .map(|c| c.to_map())
        .map_err(|e| errors::new(py, Kind::ConfigError, format!("Couldn't read the UCX options: {e}")))
}
