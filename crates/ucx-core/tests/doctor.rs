//! `doctor` against the UCX this process loads: the mapped libraries are the one UCX opened,
//! the transports and the protocol tables come from real endpoints between two workers.
use std::path::Path;

use ucx_core::doctor::{self, SIZES, TAG_SEND_HOST};
use ucx_core::{library, Context};

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

#[test]
fn the_mapped_ucx_is_the_one_opened_and_there_is_one() {
    let _ctx = context();
    let libs = doctor::mapped_ucx_libraries();
    let ucp = libs.iter().find(|l| l.name == "libucp").expect("libucp is looked for");
    assert_eq!(ucp.paths.len(), 1, "{libs:?}");
    let opened = std::fs::canonicalize(library::load().unwrap().path()).unwrap();
    assert_eq!(Path::new(&ucp.paths[0]), opened, "{libs:?}");
    let ucs = libs.iter().find(|l| l.name == "libucs").unwrap();
    assert_eq!(ucs.paths.len(), 1, "{libs:?}");
    assert_eq!(Path::new(&ucs.paths[0]).parent(), opened.parent(), "libucs beside libucp: {libs:?}");
    assert!(!doctor::second_ucx(&libs));
}

#[test]
fn host_memory_has_the_loopback_transports() {
    let ctx = context();
    let by_type = doctor::transports_by_memory_type(&ctx).unwrap();
    let host = &by_type.iter().find(|(mt, _)| *mt == "host").expect("host memory").1;
    assert!(host.iter().any(|r| r == "tcp/lo"), "{by_type:?}");
    assert!(!host.iter().any(|r| r.starts_with("tcp/") && r != "tcp/lo"), "NET_DEVICES=lo: {by_type:?}");
    assert!(host.iter().any(|r| r == "self/memory"), "{by_type:?}");
}

/// With peer error handling UCX leaves out shared memory (`UCX_MM_ERROR_HANDLING` is off by
/// default), so the intra-node table is tcp's; without, the small sizes go over shared memory.
#[test]
fn protocol_tables_differ_with_and_without_error_handling() {
    if std::env::var_os("UCX_MM_ERROR_HANDLING").is_some() || std::env::var_os("UCX_TLS").is_some() {
        eprintln!("skipped: UCX_MM_ERROR_HANDLING or UCX_TLS is set, which changes what this test expects");
        return;
    }
    let ctx = context();
    let with = doctor::probe_tag_send_protocols(&ctx, true).unwrap();
    let without = doctor::probe_tag_send_protocols(&ctx, false).unwrap();
    for table in [&with, &without] {
        assert_eq!(table.operation, TAG_SEND_HOST);
        assert!(table.config.contains("intra-node"), "{table:?}");
        for size in SIZES {
            assert!(table.row_for(size).is_some(), "no row for {size} in {table:?}");
        }
    }
    for size in SIZES {
        assert!(with.row_for(size).unwrap().transport.starts_with("tcp/lo"), "{size}: {with:?}");
    }
    let small = &without.row_for(8).unwrap().transport;
    assert!(["sysv/", "posix/", "xpmem/"].iter().any(|t| small.starts_with(t)), "{without:?}");
}

#[test]
fn system_settings_read_as_the_files_say() {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok();
    assert_eq!(doctor::ptrace_scope(), scope.map(|s| s.trim().parse().unwrap()));
    let (enabled, shmem) = doctor::transparent_huge_pages();
    if Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        let choices = ["always", "madvise", "never"];
        assert!(enabled.as_deref().is_some_and(|e| choices.contains(&e)), "{enabled:?}");
        assert!(shmem.is_some(), "shmem_enabled sits beside enabled");
    } else {
        assert_eq!((enabled, shmem), (None, None));
    }
}
