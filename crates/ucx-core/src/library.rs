//! The UCX library, found and opened at run time (`dlopen`), and the table of its functions
//! that every `sys::ucp_*` call goes through.
//!
//! Why not link it: a linked `libucp.so.0` must be found by the dynamic loader before `main`,
//! which needs an rpath in the final binary, and cargo gives a dependency's build script no way
//! to put one there. Opened here, a binary that depends on ucx-async alone runs as built.
//!
//! Where it looks, first hit wins (every miss is named in the error):
//! 1. a libucp already loaded in the process (the Python extension links the `libucx` wheel's;
//!    `import libucx` preloads it): one process never holds two UCX;
//! 2. `$UCX_DIR/lib` and `$UCX_DIR/lib64` (when set, the only place looked in after 1);
//! 3. the directory build.rs found UCX in, if it found one ([`crate::version::BUILD_LIBDIR`]);
//! 4. the system loader's search (`LD_LIBRARY_PATH`, `ld.so.cache`, the default directories);
//! 5. the `libucx` wheel of the active Python environment (`$VIRTUAL_ENV`, `$CONDA_PREFIX`),
//!    then of `python3` on `PATH`.
//!
//! A candidate also needs every function the bindings declare and a version the headers can
//! work with (same major, minor no older than [`crate::version::MIN_SUPPORTED`]). The shipped
//! bindings are UCX 1.18's (`sys`), so any UCX 1.x from 1.18 on serves them.
//!
//! Cost: a call reads the table's pointer (one atomic load, already initialised) and calls
//! through it, as a linked call goes through the PLT; `benches/transfer.rs` (`ffi_call`)
//! measures one call.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::error::{Error, Result, Status};
use crate::sys;

/// UCX's stable soname (ABI major 0 since UCX 1.0).
const SONAME: &str = "libucp.so.0";

/// The opened library: its functions, and where and how it was found.
pub struct Loaded {
    api: sys::Api,
    path: String,
    found_by: String,
}

impl Loaded {
    /// The file opened (for "already loaded" or a soname, the file the loader mapped).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Which step of the search found it, e.g. `UCX_DIR=/opt/ucx` or `the system loader`.
    pub fn found_by(&self) -> &str {
        &self.found_by
    }
}

static LOADED: OnceLock<std::result::Result<Loaded, String>> = OnceLock::new();

/// Finds and opens UCX once per process; later calls return the same answer, failure included
/// (the search depends on the environment the process started with).
///
/// [`Context::build`](crate::ContextBuilder::build) and [`Config::from_env`](crate::Config::from_env)
/// call it first, so their error says what was tried.
pub fn load() -> Result<&'static Loaded> {
    match LOADED.get_or_init(search) {
        Ok(loaded) => Ok(loaded),
        Err(tried) => Err(Error::with_detail("ucx_core::library::load", Status::NoDevice, tried.clone())),
    }
}

/// Whether UCX has been opened (without trying to).
pub fn is_loaded() -> bool {
    matches!(LOADED.get(), Some(Ok(_)))
}

/// The table every `sys::ucp_*` function calls through.
///
/// Every public way into UCX loads it first and returns [`load`]'s error; reaching this
/// without that is a bug in this crate, hence the panic (never across FFI: UCX calls back
/// only into a process where it is loaded).
#[inline]
pub(crate) fn api() -> &'static sys::Api {
    match LOADED.get() {
        Some(Ok(loaded)) => &loaded.api,
        _ => api_cold(),
    }
}

#[cold]
#[inline(never)]
fn api_cold() -> &'static sys::Api {
    match load() {
        Ok(loaded) => &loaded.api,
        Err(e) => panic!("ucx-core called UCX before it was loaded: {e}"),
    }
}

fn search() -> std::result::Result<Loaded, String> {
    // RTLD_NOLOAD: succeeds only if the process already holds it (then it is simply reused).
    if let Ok((api, path)) = open(SONAME, RTLD_NOW | libc::RTLD_NOLOAD) {
        return Ok(Loaded { api, path, found_by: "already loaded in this process".into() });
    }
    let mut candidates: Vec<(String, String)> = Vec::new();
    let mut tried = vec!["  already loaded in this process: no".to_string()];
    // An explicit choice that does not work is an error, not a reason to look elsewhere
    // (as in build.rs): running with another UCX than the one asked for would hide the mistake.
    if let Some(dir) = std::env::var_os("UCX_DIR") {
        let dir = dir.to_string_lossy();
        let mut why = Vec::new();
        for sub in ["lib", "lib64"] {
            let file = Path::new(&*dir).join(sub).join(SONAME).display().to_string();
            match open(&file, RTLD_NOW | RTLD_GLOBAL) {
                Ok((api, path)) => return Ok(Loaded { api, path, found_by: format!("UCX_DIR={dir}") }),
                Err(e) => why.push(format!("  {e}")),
            }
        }
        return Err(format!("UCX_DIR={dir} is set but holds no usable UCX library:\n{}", why.join("\n")));
    }
    tried.push("  UCX_DIR: not set".into());
    let build = crate::version::BUILD_LIBDIR;
    match build.is_empty() {
        true => tried.push("  the UCX found at build time: none was found".into()),
        false => candidates.push((
            format!("the UCX found at build time ({build})"),
            Path::new(build).join(SONAME).display().to_string(),
        )),
    }
    candidates.push(("the system loader (LD_LIBRARY_PATH, ld.so.cache)".into(), SONAME.into()));
    let envs = python_env_wheel_dirs();
    if envs.is_empty() {
        tried.push("  the libucx wheel of $VIRTUAL_ENV or $CONDA_PREFIX: neither has one".into());
    }
    for (what, dir) in envs {
        candidates.push((format!("the libucx wheel of {what}"), dir.join(SONAME).display().to_string()));
    }

    let mut attempt = |what: &str, file: &str| match open(file, RTLD_NOW | RTLD_GLOBAL) {
        Ok((api, path)) => Some(Loaded { api, path, found_by: what.to_string() }),
        Err(why) => {
            tried.push(format!("  {what}: {why}"));
            None
        }
    };
    for (what, file) in &candidates {
        if let Some(l) = attempt(what, file) {
            return Ok(l);
        }
    }
    // Last, because it starts a process: a python3 on PATH that can import libucx.
    match python3_wheel_dir() {
        Some(dir) => {
            if let Some(l) = attempt("the libucx wheel of python3 on PATH", &dir.join(SONAME).display().to_string()) {
                return Ok(l);
            }
        }
        None => tried.push("  the libucx wheel of python3 on PATH: python3 cannot import libucx".into()),
    }
    Err(format!(
        "no usable UCX library ({SONAME}, UCX >= {}.{}) was found. Tried:\n{}\n\
         Install one (`pip install libucx-cu12`, conda's `ucx`, or your distribution's) or point \
         UCX_DIR at a UCX prefix.",
        crate::version::MIN_SUPPORTED.0,
        crate::version::MIN_SUPPORTED.1,
        tried.join("\n")
    ))
}

/// Opens `file` with `flags` and resolves the table; checks the version.
fn open(file: &str, flags: i32) -> std::result::Result<(sys::Api, String), String> {
    // SAFETY: opening libucp runs its and libucs's initialisers, which set up UCX's global
    // state (what linking it would do before main). The handle is never closed, even when the
    // library is refused below: UCX's memory hooks (libucm) patch functions of the process
    // when it loads, so unloading it could leave them jumping into unmapped code.
    let lib = std::mem::ManuallyDrop::new(unsafe { Library::open(Some(file), flags) }.map_err(|e| e.to_string())?);
    let mut symbol = |name: &[u8]| {
        // SAFETY: only the address is read; its type is asserted by Api::resolve's caller below.
        unsafe { lib.get::<*mut std::ffi::c_void>(name) }.ok().map(|s| *s)
    };
    // SAFETY: the symbols come from this libucp (and the libucs it depends on), kept loaded
    // for the rest of the process (the handle is never dropped); their prototypes are the
    // headers' the bindings were generated from, and the version is checked next.
    let api = unsafe { sys::Api::resolve(&mut symbol) }.map_err(|missing| format!("{file} lacks {missing}"))?;
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: ucp_get_version only writes the three integers.
    unsafe { (api.ucp_get_version)(&mut major, &mut minor, &mut release) };
    let min = crate::version::MIN_SUPPORTED;
    if major != min.0 || minor < min.1 {
        return Err(format!("{file} is UCX {major}.{minor}.{release}, older than the minimum {}.{}", min.0, min.1));
    }
    let path = mapped_path(api.ucp_get_version as *const std::ffi::c_void).unwrap_or_else(|| file.to_string());
    Ok((api, path))
}

/// The file the loader mapped for the function at `addr` (`dladdr`).
fn mapped_path(addr: *const std::ffi::c_void) -> Option<String> {
    // SAFETY: Dl_info is plain C data that dladdr fills.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: addr is a function in a loaded object; dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader, valid while mapped.
    Some(unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

/// The `libucx/lib` directories of the active Python environments (`$VIRTUAL_ENV`,
/// `$CONDA_PREFIX`).
fn python_env_wheel_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let Some(prefix) = std::env::var_os(var) else { continue };
        let Ok(entries) = std::fs::read_dir(Path::new(&prefix).join("lib")) else { continue };
        for entry in entries.flatten() {
            let dir = entry.path().join("site-packages/libucx/lib");
            if entry.file_name().to_string_lossy().starts_with("python") && dir.is_dir() {
                dirs.push((format!("{var}={}", prefix.to_string_lossy()), dir));
            }
        }
    }
    dirs
}

/// The `libucx/lib` directory of `python3` on `PATH`, if it can import libucx.
fn python3_wheel_dir() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import libucx, os; print(os.path.dirname(libucx.__file__))"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib"))
}
