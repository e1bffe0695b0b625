//! ucx-core's build script. By default it needs no UCX, no UCX headers and no libclang: the FFI
//! bindings ship with the crate (`bindings/ucx-1.18.rs`, what feature `bindgen` generates from
//! UCX 1.18's headers, the oldest UCX supported), and UCX is opened at run time
//! (`src/library.rs`). All it does then is look for a UCX library, to note its directory as one
//! place the run-time search tries and to tell dependents where it is; finding none is fine.
//!
//! With feature `bindgen`, it generates the bindings from the headers of the UCX it finds
//! instead (needs those headers and libclang), and stops if it finds none: for a UCX whose API
//! differs from 1.18's. Either way every UCX function becomes a call through a table that
//! `src/library.rs` fills at run time (`dlopen`), so nothing is linked: a binary that depends on
//! ucx-core (directly or through ucx-async) starts without a build script of its own, an rpath
//! or `LD_LIBRARY_PATH`. `scripts/ci/bindings-check.sh` checks that the shipped file is what
//! feature `bindgen` generates from UCX 1.18's headers.
//!
//! Search order (the first that holds a UCX library, with headers >= MIN where they are read):
//! 1. `UCX_DIR`: a prefix with `lib/libucp.so` (and `include/ucp/api/ucp.h` for `bindgen`);
//!    set, it is the only place looked in.
//! 2. `pkg-config ucx` (a conda or distribution UCX).
//! 3. The `libucx` Python wheel (`pip install libucx-cu12`), located through a Python that can
//!    import it: `UCX_PYTHON`, then `$VIRTUAL_ENV/bin/python`, then `PYO3_PYTHON` (set by
//!    maturin), then the workspace's `.venv`,
//!    then `python3`. Its .pc files carry the prefix of the machine that built the wheel, so the
//!    package directory itself is used as the prefix.
//!
//! Exports `DEP_UCP_LIBDIR` (and `DEP_UCP_INCLUDE` where headers were found) to dependents
//! (through `links = "ucp"`), and `DEP_UCP_FROM_WHEEL` (`1` when UCX came from the `libucx`
//! wheel): the Python extension links libucp itself, through the installed wheel's layout, so
//! that it is loaded before ucx-core looks. Nothing is exported when no UCX was found.
use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The oldest UCX ucx-core supports: 1.15 compiles, but reports length 0 for a tag receive
/// that completes inline (the test suite fails on it); 1.18 passes. The shipped bindings are
/// generated from its headers.
const MIN: (u32, u32) = (1, 18);

struct Ucx {
    /// `include/`, where it has `ucp/api/ucp_version.h`.
    include: Option<PathBuf>,
    libdir: PathBuf,
    how: String,
    from_wheel: bool,
}

fn main() {
    for var in ["UCX_DIR", "UCX_PYTHON", "VIRTUAL_ENV", "PYO3_PYTHON", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let bindgen = cfg!(feature = "bindgen");

    let found = match find(bindgen) {
        Ok(ucx) => Some(ucx),
        Err(tried) if bindgen => panic!(
            "\n\nucx-core (feature `bindgen`): no UCX (>= {}.{}) with headers was found.\nTried:\n{}\n\
             Get one of these:\n  \
             * the PyPI wheel:   python3 -m pip install libucx-cu12   (what the README's set-up does)\n  \
             * conda:            conda install -c conda-forge ucx   (then PKG_CONFIG_PATH=$CONDA_PREFIX/lib/pkgconfig)\n  \
             * a cluster's UCX:  UCX_DIR=/path/to/ucx (a prefix with include/ and lib/)\n\
             Without feature `bindgen`, ucx-core builds with its shipped bindings and needs none.\n\n",
            MIN.0,
            MIN.1,
            tried.join("\n")
        ),
        Err(_) => None,
    };

    match &found {
        Some(ucx) => {
            println!("cargo:libdir={}", ucx.libdir.display());
            if let Some(include) = &ucx.include {
                println!("cargo:include={}", include.display());
            }
            println!("cargo:from_wheel={}", u8::from(ucx.from_wheel));
            println!("cargo:rustc-env=UCXRS_BUILD_LIBDIR={}", ucx.libdir.display());
            println!("cargo:rustc-env=UCXRS_BUILD_FOUND_BY={}", ucx.how);
        }
        None => {
            println!("cargo:rustc-env=UCXRS_BUILD_LIBDIR=");
            println!("cargo:rustc-env=UCXRS_BUILD_FOUND_BY=none (no UCX was found at build time)");
        }
    }

    #[cfg(feature = "bindgen")]
    {
        let ucx = found.as_ref().expect("find() with headers required returned one or panicked above");
        let include = ucx.include.as_ref().expect("find() with headers required returns their directory");
        generate::bindings(include);
    }
    #[cfg(not(feature = "bindgen"))]
    shipped_bindings_fit_the_target();
}

/// The shipped bindings were generated on x86_64 Linux; UCX's types have the same layout on
/// every 64-bit Linux (LP64), except `va_list`, which only x86_64 code uses (`src/log.rs`).
#[cfg(not(feature = "bindgen"))]
fn shipped_bindings_fit_the_target() {
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let width = env::var("CARGO_CFG_TARGET_POINTER_WIDTH").unwrap_or_default();
    if os != "linux" || width != "64" {
        panic!(
            "\n\nucx-core's shipped UCX bindings are for 64-bit Linux; this target is {os}, {width}-bit. \
             Build with feature `bindgen` (needs UCX's headers and libclang) to generate them.\n\n"
        );
    }
}

/// Looks for UCX in the order of the module's docs; `headers`: only a UCX whose headers are
/// there counts (feature `bindgen`). Without them, a library directory is enough, and a
/// `UCX_DIR` that holds none means no UCX (not a search elsewhere: the run-time search looks
/// only there too).
fn find(headers: bool) -> Result<Ucx, Vec<String>> {
    let mut tried = Vec::new();
    if let Ok(dir) = env::var("UCX_DIR") {
        let prefix = PathBuf::from(&dir);
        let libdir = [prefix.join("lib"), prefix.join("lib64")]
            .into_iter()
            .find(|d| d.join("libucp.so").exists())
            .unwrap_or_else(|| prefix.join("lib"));
        return match check(prefix.join("include"), libdir, format!("UCX_DIR={dir}"), headers) {
            Ok(u) => Ok(u),
            // An explicit choice that does not work is an error, not a reason to look elsewhere.
            Err(e) if headers => panic!("\n\nucx-core: UCX_DIR is set but unusable: {e}\n\n"),
            Err(e) => Err(vec![format!("  UCX_DIR={dir}: {e}")]),
        };
    }

    match pkg_config::Config::new().cargo_metadata(false).env_metadata(false).probe("ucx") {
        Ok(lib) => {
            let include = lib.include_paths.first().cloned().unwrap_or_default();
            let libdir = lib.link_paths.first().cloned().unwrap_or_default();
            match check(include, libdir, format!("pkg-config ucx {}", lib.version), headers) {
                Ok(u) => return Ok(u),
                Err(e) => tried.push(format!("  pkg-config ucx: {e}")),
            }
        }
        Err(e) => tried.push(format!("  pkg-config ucx: {}", first_line(&e.to_string()))),
    }

    for python in python_candidates() {
        let out =
            Command::new(&python).args(["-c", "import libucx, os; print(os.path.dirname(libucx.__file__))"]).output();
        match out {
            Ok(o) if o.status.success() => {
                let prefix = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
                match check(prefix.join("include"), prefix.join("lib"), format!("libucx wheel via {python}"), headers) {
                    Ok(u) => return Ok(Ucx { from_wheel: true, ..u }),
                    Err(e) => tried.push(format!("  libucx wheel via {python}: {e}")),
                }
            }
            Ok(_) => tried.push(format!("  {python}: cannot import libucx")),
            Err(_) => tried.push(format!("  {python}: not found")),
        }
    }
    Err(tried)
}

fn python_candidates() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(p) = env::var("UCX_PYTHON") {
        v.push(p);
    }
    if let Ok(venv) = env::var("VIRTUAL_ENV") {
        v.push(format!("{venv}/bin/python"));
    }
    // The interpreter maturin builds for (`pip install .`: its isolated build environment,
    // where pyproject.toml's build requirements put the libucx wheel, is on its path).
    if let Ok(p) = env::var("PYO3_PYTHON") {
        v.push(p);
    }
    // The workspace's own virtualenv, made by scripts/setup.sh.
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    if let Some(root) = manifest.ancestors().find(|d| d.join(".venv/bin/python").exists()) {
        v.push(root.join(".venv/bin/python").display().to_string());
    }
    v.push("python3".to_string());
    v.dedup();
    v
}

/// A UCX at `include` and `libdir`: its library must be there, and its headers too when
/// `headers` is set; headers that are there must be no older than [`MIN`].
fn check(include: PathBuf, libdir: PathBuf, how: String, headers: bool) -> Result<Ucx, String> {
    if !libdir.join("libucp.so").exists() && !libdir.join("libucp.so.0").exists() {
        return Err(format!("no libucp.so in {}", libdir.display()));
    }
    let version_h = include.join("ucp/api/ucp_version.h");
    let text = match std::fs::read_to_string(&version_h) {
        Ok(text) => text,
        Err(e) if headers => return Err(format!("{}: {e}", version_h.display())),
        // The library alone is what the run-time search needs; it checks the version itself.
        Err(_) => return Ok(Ucx { include: None, libdir, how: format!("{how}, library only"), from_wheel: false }),
    };
    let major = define(&text, "UCP_API_MAJOR").ok_or("no UCP_API_MAJOR in ucp_version.h")?;
    let minor = define(&text, "UCP_API_MINOR").ok_or("no UCP_API_MINOR in ucp_version.h")?;
    if (major, minor) < MIN {
        return Err(format!("UCX {major}.{minor} is older than the minimum {}.{}", MIN.0, MIN.1));
    }
    Ok(Ucx { include: Some(include), libdir, how: format!("{how}, API {major}.{minor}"), from_wheel: false })
}

fn define(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("#define") && it.next() == Some(name)).then(|| it.next()?.parse().ok())?
    })
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim()
}

/// Feature `bindgen`: the bindings generated from the headers found, written to
/// `$OUT_DIR/bindings.rs` (which `src/sys.rs` includes instead of the shipped file).
#[cfg(feature = "bindgen")]
mod generate {
    use std::env;
    use std::path::{Path, PathBuf};

    pub fn bindings(include: &Path) {
        let version_h = include.join("ucp/api/ucp_version.h");
        let text = std::fs::read_to_string(&version_h).expect("find() read ucp_version.h");
        let version = (
            super::define(&text, "UCP_API_MAJOR").unwrap_or_default(),
            super::define(&text, "UCP_API_MINOR").unwrap_or_default(),
        );
        let bindings = bindgen::Builder::default()
            // log_def.h and stdio.h: a log handler that reads UCX's reason for a failure (log.rs).
            .header_contents(
                "wrapper.h",
                "#include <ucp/api/ucp.h>\n#include <ucs/debug/log_def.h>\n#include <stdio.h>\n",
            )
            .clang_arg(format!("-I{}", include.display()))
            .allowlist_function(
                "ucp_.*|ucs_status_string|ucs_get_version|ucs_log_push_handler|ucs_log_pop_handler|vsnprintf",
            )
            .allowlist_type("ucp_.*|ucs_.*")
            .allowlist_var("UCP_.*|UCS_.*")
            .prepend_enum_name(false)
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .generate()
            .expect("bindgen could not generate UCX bindings");
        let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo")).join("bindings.rs");
        std::fs::write(out, run_time_linked(&bindings.to_string(), version)).expect("writing bindings.rs");
    }

    /// Rewrites bindgen's `extern "C"` declarations of UCX's functions (`ucp_*`, `ucs_*`) into:
    /// - `Api`, a struct with one function pointer per function, and `Api::resolve`, which fills it
    ///   from a symbol lookup (`src/library.rs` passes `dlsym` on the opened libucp);
    /// - a free function of the same name and signature per function, calling through the table
    ///   that `crate::library::api()` returns, so that the rest of the crate calls `sys::ucp_x(..)`
    ///   as if it were linked.
    ///
    /// Other declarations (libc's `vsnprintf`) stay `extern "C"`: the C library is always linked.
    fn run_time_linked(bindings: &str, version: (u32, u32)) -> String {
        use quote::{format_ident, quote};
        let file: syn::File = syn::parse_str(bindings).expect("bindgen's output parses");
        let mut kept = Vec::new();
        let (mut fields, mut resolves, mut wrappers) = (Vec::new(), Vec::new(), Vec::new());
        for item in file.items {
            let syn::Item::ForeignMod(mut block) = item else {
                kept.push(item);
                continue;
            };
            let mut others = Vec::new();
            for foreign in std::mem::take(&mut block.items) {
                let f = match foreign {
                    syn::ForeignItem::Fn(f) if is_ucx(&f.sig.ident.to_string()) && f.sig.variadic.is_none() => f,
                    other => {
                        others.push(other);
                        continue;
                    }
                };
                let name = &f.sig.ident;
                let inputs = &f.sig.inputs;
                let output = &f.sig.output;
                let mut types = Vec::new();
                let mut args = Vec::new();
                for (i, input) in inputs.iter().enumerate() {
                    let syn::FnArg::Typed(t) = input else { panic!("{name}: a receiver in an extern fn") };
                    types.push(t.ty.clone());
                    args.push(match &*t.pat {
                        syn::Pat::Ident(p) => p.ident.clone(),
                        _ => format_ident!("arg{i}"),
                    });
                }
                let symbol = syn::LitByteStr::new(format!("{name}\0").as_bytes(), name.span());
                fields.push(quote! { pub #name: unsafe extern "C" fn(#(#types),*) #output, });
                resolves.push(quote! {
                    #name: {
                        let p = symbol(#symbol).ok_or(stringify!(#name))?;
                        // SAFETY: the caller promises `symbol` returns this function's address in a
                        // UCX whose prototype is the one declared (the headers bindgen read).
                        unsafe { ::core::mem::transmute::<*mut ::core::ffi::c_void, unsafe extern "C" fn(#(#types),*) #output>(p) }
                    },
                });
                wrappers.push(quote! {
                    #[inline]
                    pub unsafe fn #name(#(#args: #types),*) #output {
                        unsafe { (crate::library::api().#name)(#(#args),*) }
                    }
                });
            }
            if !others.is_empty() {
                block.items = others;
                kept.push(syn::Item::ForeignMod(block));
            }
        }
        let generated = quote! {
            #(#kept)*

            /// UCX's functions, resolved from the library opened at run time.
            pub struct Api { #(#fields)* }

            impl Api {
                /// Fills the table with `symbol(name)` for every function; the first that is
                /// missing is returned as the error.
                ///
                /// # Safety
                /// `symbol` must return the address of the named function of a UCX library that
                /// stays loaded for the rest of the process.
                pub unsafe fn resolve(
                    symbol: &mut dyn FnMut(&[u8]) -> Option<*mut ::core::ffi::c_void>,
                ) -> Result<Api, &'static str> {
                    Ok(Api { #(#resolves)* })
                }
            }

            #(#wrappers)*
        };
        // Pretty-printed, so that a compiler message pointing into it can be read.
        let file: syn::File = syn::parse2(generated).expect("the rewritten bindings parse");
        format!(
            "/* generated by crates/ucx-core/build.rs (feature `bindgen`) from UCX {}.{}'s headers: \
             bindgen's output, rewritten to call through a table (src/library.rs fills it) */\n{}",
            version.0,
            version.1,
            prettyplease::unparse(&file)
        )
    }

    fn is_ucx(name: &str) -> bool {
        name.starts_with("ucp_") || name.starts_with("ucs_")
    }
}
