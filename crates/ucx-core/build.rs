//! Finds UCX's headers, generates the FFI bindings with bindgen, and turns every UCX function
//! into a call through a table that `src/library.rs` fills at run time (`dlopen`). Nothing is
//! linked: a binary that depends on ucx-core (directly or through ucx-async) starts without a
//! build script of its own, an rpath or `LD_LIBRARY_PATH`; the library is looked for when the
//! first context is made (the UCX found here is one of the places looked in).
//!
//! Search order (the first that yields UCX >= MIN is used):
//! 1. `UCX_DIR`: a prefix with `include/ucp/api/ucp.h` and `lib/libucp.so` (a cluster's own UCX).
//! 2. `pkg-config ucx` (a conda or distribution UCX).
//! 3. The `libucx` Python wheel (`pip install libucx-cu12`), located through a Python that can
//!    import it: `UCX_PYTHON`, then `$VIRTUAL_ENV/bin/python`, then `PYO3_PYTHON` (set by
//!    maturin), then the workspace's `.venv`,
//!    then `python3`. Its .pc files carry the prefix of the machine that built the wheel, so the
//!    package directory itself is used as the prefix.
//!
//! Exports `DEP_UCP_LIBDIR` / `DEP_UCP_INCLUDE` to dependents (through `links = "ucp"`), and
//! `DEP_UCP_FROM_WHEEL` (`1` when UCX came from the `libucx` wheel): the Python extension links
//! libucp itself, through the installed wheel's layout, so that it is loaded before ucx-core looks.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest UCX ucx-core supports: 1.15 compiles, but reports length 0 for a tag receive
/// that completes inline (the test suite fails on it); 1.18 passes.
const MIN: (u32, u32) = (1, 18);

struct Ucx {
    include: PathBuf,
    libdir: PathBuf,
    how: String,
    from_wheel: bool,
}

fn main() {
    for var in ["UCX_DIR", "UCX_PYTHON", "VIRTUAL_ENV", "PYO3_PYTHON", "PKG_CONFIG_PATH", "DOCS_RS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("DOCS_RS").is_some() {
        docs_only();
        return;
    }

    let ucx = find().unwrap_or_else(|tried| {
        panic!(
            "\n\nucx-core: no usable UCX (>= {}.{}) was found.\nTried:\n{}\n\
             Get one of these:\n  \
             * the PyPI wheel:   python3 -m pip install libucx-cu12   (what the README's set-up does)\n  \
             * conda:            conda install -c conda-forge ucx   (then PKG_CONFIG_PATH=$CONDA_PREFIX/lib/pkgconfig)\n  \
             * a cluster's UCX:  UCX_DIR=/path/to/ucx (a prefix with include/ and lib/)\n\n",
            MIN.0,
            MIN.1,
            tried.join("\n")
        )
    });

    println!("cargo:libdir={}", ucx.libdir.display());
    println!("cargo:include={}", ucx.include.display());
    println!("cargo:from_wheel={}", u8::from(ucx.from_wheel));
    println!("cargo:rustc-env=UCXRS_BUILD_LIBDIR={}", ucx.libdir.display());
    println!("cargo:rustc-env=UCXRS_BUILD_FOUND_BY={}", ucx.how);

    generate_bindings(&ucx.include);
}

/// docs.rs has no UCX: the documentation is built from bindings pre-generated from the oldest
/// supported UCX's headers, and nothing is linked (a documentation build never links).
fn docs_only() {
    let pregenerated = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join(format!("docs-rs/bindings-ucx-{}.{}.rs", MIN.0, MIN.1));
    println!("cargo:rerun-if-changed={}", pregenerated.display());
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo")).join("bindings.rs");
    let text = std::fs::read_to_string(&pregenerated).expect("reading the pre-generated bindings");
    std::fs::write(out, run_time_linked(&text)).expect("writing bindings.rs");
    println!("cargo:rustc-env=UCXRS_BUILD_LIBDIR=");
    println!("cargo:rustc-env=UCXRS_BUILD_FOUND_BY=pre-generated bindings for docs.rs");
}

fn find() -> Result<Ucx, Vec<String>> {
    let mut tried = Vec::new();
    if let Ok(dir) = env::var("UCX_DIR") {
        let prefix = PathBuf::from(&dir);
        let libdir = [prefix.join("lib"), prefix.join("lib64")]
            .into_iter()
            .find(|d| d.join("libucp.so").exists())
            .unwrap_or_else(|| prefix.join("lib"));
        match check(prefix.join("include"), libdir, format!("UCX_DIR={dir}")) {
            Ok(u) => return Ok(u),
            // An explicit choice that does not work is an error, not a reason to look elsewhere.
            Err(e) => panic!("\n\nucx-core: UCX_DIR is set but unusable: {e}\n\n"),
        }
    }

    match pkg_config::Config::new().cargo_metadata(false).env_metadata(false).probe("ucx") {
        Ok(lib) => {
            let include = lib.include_paths.first().cloned().unwrap_or_default();
            let libdir = lib.link_paths.first().cloned().unwrap_or_default();
            match check(include, libdir, format!("pkg-config ucx {}", lib.version)) {
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
                match check(prefix.join("include"), prefix.join("lib"), format!("libucx wheel via {python}")) {
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

fn check(include: PathBuf, libdir: PathBuf, how: String) -> Result<Ucx, String> {
    let version_h = include.join("ucp/api/ucp_version.h");
    let text = std::fs::read_to_string(&version_h).map_err(|e| format!("{}: {e}", version_h.display()))?;
    let major = define(&text, "UCP_API_MAJOR").ok_or("no UCP_API_MAJOR in ucp_version.h")?;
    let minor = define(&text, "UCP_API_MINOR").ok_or("no UCP_API_MINOR in ucp_version.h")?;
    if (major, minor) < MIN {
        return Err(format!("UCX {major}.{minor} is older than the minimum {}.{}", MIN.0, MIN.1));
    }
    if !libdir.join("libucp.so").exists() && !libdir.join("libucp.so.0").exists() {
        return Err(format!("no libucp.so in {}", libdir.display()));
    }
    Ok(Ucx { include, libdir, how: format!("{how}, API {major}.{minor}"), from_wheel: false })
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

fn generate_bindings(include: &Path) {
    let bindings = bindgen::Builder::default()
        // log_def.h and stdio.h: a log handler that reads UCX's reason for a failure (log.rs).
        .header_contents("wrapper.h", "#include <ucp/api/ucp.h>\n#include <ucs/debug/log_def.h>\n#include <stdio.h>\n")
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
    std::fs::write(out, run_time_linked(&bindings.to_string())).expect("writing bindings.rs");
}

/// Rewrites bindgen's `extern "C"` declarations of UCX's functions (`ucp_*`, `ucs_*`) into:
/// - `Api`, a struct with one function pointer per function, and `Api::resolve`, which fills it
///   from a symbol lookup (`src/library.rs` passes `dlsym` on the opened libucp);
/// - a free function of the same name and signature per function, calling through the table
///   that `crate::library::api()` returns, so that the rest of the crate calls `sys::ucp_x(..)`
///   as if it were linked.
///
/// Other declarations (libc's `vsnprintf`) stay `extern "C"`: the C library is always linked.
fn run_time_linked(bindings: &str) -> String {
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
    format!("/* generated by crates/ucx-core/build.rs from bindgen's output */\n{}", prettyplease::unparse(&file))
}

fn is_ucx(name: &str) -> bool {
    name.starts_with("ucp_") || name.starts_with("ucs_")
}
