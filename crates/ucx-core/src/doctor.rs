//! What a diagnostics report (`python -m ucp.doctor`, `examples/doctor.rs`) says about UCX in
//! this process, for when UCX is slow or silent: which UCX libraries are mapped (two copies of
//! one in a process is a known cause of crashes and hangs), the transports a context has per
//! memory type, which protocol and transport an endpoint between two workers of this host
//! selects per message size (UCX's own tables), and the system settings that change what
//! shared memory can do (transparent huge pages, the ptrace scope that gates CMA).
//!
//! No FFI here: it reads what the crate's safe API and `/proc`, `/sys` give.
use std::time::{Duration, Instant};

use crate::{Context, Endpoint, EndpointParams, Error, Result, Status, Worker, FULL_MASK};

/// The UCX libraries looked for among the files mapped.
pub const UCX_LIBRARIES: [&str; 4] = ["libucp", "libucs", "libuct", "libucm"];

/// The operation whose protocol table the report reads: what an endpoint's `tag_send` of host
/// memory uses (UCX's own words, the second line of the table's title).
pub const TAG_SEND_HOST: &str = "tagged message by ucp_tag_send* from host memory";

/// The message sizes the report shows a protocol for.
pub const SIZES: [u64; 4] = [8, 64 << 10, 1 << 20, 16 << 20];

/// One UCX library and the files of it this process maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedLibrary {
    /// `libucp`, `libucs`, `libuct` or `libucm`.
    pub name: &'static str,
    /// Each distinct file mapped (the loader's path, symbolic links resolved); more than one is
    /// a second UCX in the process.
    pub paths: Vec<String>,
}

/// The UCX libraries this process maps, from `/proc/self/maps`: each of [`UCX_LIBRARIES`] with
/// the files of it mapped (none where UCX is not loaded yet).
pub fn mapped_ucx_libraries() -> Vec<MappedLibrary> {
    ucx_libraries_in(&crate::proc_maps::mapped_files())
}

fn ucx_libraries_in(files: &[String]) -> Vec<MappedLibrary> {
    UCX_LIBRARIES
        .iter()
        .map(|&name| {
            let paths = files
                .iter()
                .filter(|f| {
                    let base = f.rsplit('/').next().unwrap_or(f);
                    base.strip_prefix(name).is_some_and(|rest| rest.starts_with(".so"))
                })
                .cloned()
                .collect();
            MappedLibrary { name, paths }
        })
        .collect()
}

/// Whether a library is mapped from two or more files: two UCX in one process.
pub fn second_ucx(libraries: &[MappedLibrary]) -> bool {
    libraries.iter().any(|l| l.paths.len() > 1)
}

/// Transports that only move device memory (copies to and from it, or between devices).
const DEVICE_TRANSPORTS: [(&str, &str); 8] = [
    ("cuda_copy", "cuda"),
    ("cuda_ipc", "cuda"),
    ("gdr_copy", "cuda"),
    ("rocm_copy", "rocm"),
    ("rocm_ipc", "rocm"),
    ("rocm_gdr", "rocm"),
    ("ze_copy", "ze-device"),
    ("ze_ipc", "ze-device"),
];

/// The context's resources per memory type it supports, in its order: `host` gets every
/// resource but the device-memory transports (`cuda_copy`, `cuda_ipc`, `gdr_copy`, ROCm's and
/// Level Zero's), each device memory type its own. (Networks that can reach device memory
/// directly, GPUDirect RDMA, are listed under `host` only: UCX's API does not say which can.)
pub fn transports_by_memory_type(context: &Context) -> Result<Vec<(&'static str, Vec<String>)>> {
    Ok(group_by_memory_type(&context.memory_types()?, &context.resources()))
}

fn group_by_memory_type(memory_types: &[&'static str], resources: &[String]) -> Vec<(&'static str, Vec<String>)> {
    let device_kind = |resource: &str| {
        let tl = resource.split('/').next().unwrap_or(resource);
        DEVICE_TRANSPORTS.iter().find(|(t, _)| *t == tl).map(|(_, kind)| *kind)
    };
    memory_types
        .iter()
        .map(|&mt| {
            let of_kind = resources.iter().filter(|r| match device_kind(r) {
                None => mt == "host",
                Some(kind) => mt.starts_with(kind),
            });
            (mt, of_kind.cloned().collect())
        })
        .collect()
}

/// One row of a protocol table: the message sizes it covers and what UCX chose for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolRow {
    /// The first size covered, in bytes.
    pub first: u64,
    /// The last size covered; `None` for `inf`.
    pub last: Option<u64>,
    /// UCX's words for the range, e.g. `8K..16352`.
    pub range: String,
    /// The protocol, e.g. `eager short` or `(?) rendezvous zero-copy read from remote` (UCX
    /// marks with `(?)` a choice it made on estimated performance).
    pub protocol: String,
    /// The transports (and devices) it runs on, e.g. `tcp/lo` or `cma/memory`.
    pub transport: String,
}

/// A protocol table as UCX prints it for an endpoint's configuration (`ucp_ep_print_info`,
/// or the log with `UCX_PROTO_INFO=y`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolTable {
    /// The configuration, e.g. `ucp_context_0 intra-node cfg#1`.
    pub config: String,
    /// The operation, e.g. [`TAG_SEND_HOST`].
    pub operation: String,
    /// The rows, smallest sizes first.
    pub rows: Vec<ProtocolRow>,
}

impl ProtocolTable {
    /// The row that covers a message of `size` bytes.
    pub fn row_for(&self, size: u64) -> Option<&ProtocolRow> {
        self.rows.iter().find(|r| r.first <= size && r.last.is_none_or(|last| size <= last))
    }
}

/// The protocol tables in `text` (UCX's boxes of `+---` rules: title lines, a `Range |
/// Description | Config` header, rows); a line prefix such as `# ` or a log line's
/// `[time] [host:pid] ` before each box line is skipped.
pub fn protocol_tables(text: &str) -> Vec<ProtocolTable> {
    // Each box line from its first '+' or '|', with its prefix dropped.
    let lines: Vec<&str> = text.lines().filter_map(|l| l.find(['+', '|']).map(|i| l[i..].trim_end())).collect();
    let cells =
        |l: &str| -> Vec<String> { l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>() };
    let mut tables = Vec::new();
    let mut i = 0;
    while i + 5 < lines.len() {
        // rule, title (config), title (operation), rule, header, rule, rows..., rule
        let is_rule = |l: &str| l.starts_with("+-");
        let header_ok = lines[i + 4].contains("Range") && lines[i + 4].contains("Description");
        if !(is_rule(lines[i]) && !is_rule(lines[i + 1]) && is_rule(lines[i + 3]) && header_ok) {
            i += 1;
            continue;
        }
        let title = |l: &str| l.trim_matches('|').trim().to_string();
        let (config, operation) = (title(lines[i + 1]), title(lines[i + 2]));
        let mut rows = Vec::new();
        let mut j = i + 6;
        while j < lines.len() && !is_rule(lines[j]) {
            if let [range, protocol, transport, ..] = &cells(lines[j])[..] {
                if let Some((first, last)) = parse_range(range) {
                    rows.push(ProtocolRow {
                        first,
                        last,
                        range: range.clone(),
                        protocol: protocol.clone(),
                        transport: transport.clone(),
                    });
                }
            }
            j += 1;
        }
        tables.push(ProtocolTable { config, operation, rows });
        i = j;
    }
    tables
}

/// The transports of an endpoint's data lanes in its `ucp_ep_print_info` text (what
/// [`Endpoint::transports`] reads), e.g. `["tcp"]`, `["sysv", "posix", "cma"]`.
pub fn lane_transports(info: &str) -> Vec<String> {
    crate::endpoint::lane_transports(info)
}

/// `0`, `93..8191`, `8K..16352`, `16353..inf`, `1M..inf`: UCX's size ranges (K, M, G, T in
/// units of 1024).
fn parse_range(range: &str) -> Option<(u64, Option<u64>)> {
    let size = |s: &str| -> Option<u64> {
        let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((at, _)) => s.split_at(at),
            None => (s, ""),
        };
        let shift = match unit {
            "" => 0,
            "K" => 10,
            "M" => 20,
            "G" => 30,
            "T" => 40,
            _ => return None,
        };
        digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
    };
    match range.split_once("..") {
        None => size(range).map(|n| (n, Some(n))),
        Some((first, "inf")) => Some((size(first)?, None)),
        Some((first, last)) => Some((size(first)?, Some(size(last)?))),
    }
}

/// The protocol table UCX selects for a host-memory tag send from one worker of `context` to
/// another (two workers of one process on one host, as two processes of this host would be
/// connected: the table says `intra-node`), with peer error handling on or off. Sends 8-byte
/// messages until UCX has printed the table for the endpoint's configuration; fails with
/// [`Status::TimedOut`] if that takes over 10 s.
pub fn probe_tag_send_protocols(context: &Context, error_handling: bool) -> Result<ProtocolTable> {
    let sender = Worker::new(context)?;
    let receiver = Worker::new(context)?;
    let ep = Endpoint::connect_to_worker(
        &sender,
        &receiver.address()?,
        EndpointParams::default().error_handling(error_handling),
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let progress_until = |done: &dyn Fn() -> bool| -> Result<()> {
        while !done() {
            sender.progress();
            receiver.progress();
            if Instant::now() > deadline {
                return Err(Error::with_detail(
                    "doctor::probe_tag_send_protocols",
                    Status::TimedOut,
                    "an 8-byte message between two workers of this process took over 10 s".to_string(),
                ));
            }
        }
        Ok(())
    };
    let table = loop {
        // The endpoint's configuration can change once wire-up completes; the table printed is
        // the one its current configuration selected, so send until it is there.
        let (data, mut got) = ([1u8; 8], [0u8; 8]);
        let recv = receiver.tag_recv(&mut got, 1, FULL_MASK)?;
        let send = ep.tag_send(&data, 1)?;
        for op in [&send, &recv] {
            if let crate::Submitted::InFlight(r) = op {
                progress_until(&|| r.is_complete())?;
            }
        }
        send.wait()?;
        recv.wait()?;
        let found = protocol_tables(&ep.info()).into_iter().find(|t| t.operation == TAG_SEND_HOST);
        if let Some(table) = found {
            break table;
        }
        if Instant::now() > deadline {
            return Err(Error::with_detail(
                "doctor::probe_tag_send_protocols",
                Status::TimedOut,
                format!("UCX printed no table for {TAG_SEND_HOST:?} in the endpoint's information"),
            ));
        }
    };
    // The endpoint is dropped (closed) before the workers, which outlive it here.
    drop(ep);
    Ok(table)
}

/// A line of a `/sys/kernel/mm/transparent_hugepage` setting: the choices with the one in
/// force in brackets (`always [madvise] never`).
fn bracketed(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(text[start..start + len].to_string())
}

/// Transparent huge pages: the settings in force for private memory (`enabled`) and for
/// shared memory (`shmem_enabled`), e.g. `("madvise", "never")`; `None` where the kernel has no
/// such file. Large buffers on huge pages make CMA's single copy cheaper to set up.
pub fn transparent_huge_pages() -> (Option<String>, Option<String>) {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{name}")).ok().and_then(|t| bracketed(&t))
    };
    (read("enabled"), read("shmem_enabled"))
}

/// Yama's ptrace scope (`/proc/sys/kernel/yama/ptrace_scope`); `None` where the file is absent
/// (Yama not built in: nothing enforced). UCX's CMA transport (one copy between processes,
/// `process_vm_readv`) needs to be allowed to ptrace its peer: with scope 1 only a parent may,
/// and at 2 or 3 only a privileged process, so CMA fails or is left out.
pub fn ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok()?.trim().parse().ok()
}

/// The kernel's TCP congestion control for this process's network namespace
/// (`/proc/sys/net/ipv4/tcp_congestion_control`), e.g. `cubic`; `None` where the file is
/// absent. It paces UCX's tcp transport as it does any socket: on the project's 2-core VM a
/// 1 MiB message over loopback took 2.4 times as long for a Python socket under bbr as under
/// cubic, and UCX's tcp transport across a veth pair took 150 to 370 µs under bbr
/// (docs/performance.md).
pub fn tcp_congestion_control() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").ok()?;
    let name = text.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_tables_are_read_from_endpoint_info_and_log_lines() {
        // From ucp_ep_print_info (UCX 1.22, peer error handling off), and the same box as the
        // UCX_PROTO_INFO=y log prints it.
        let info = "#\n# UCP endpoint \n#\n\
            #                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] seg 4294967295 am\n\
            #\n\
            # +----------+-------------------------------------------+-------------+\n\
            # | ucp_context_0 intra-node cfg#1                                     |\n\
            # | tagged message by ucp_tag_send* from host memory                   |\n\
            # +----------+-------------------------------------------+-------------+\n\
            # |  Range   |                Description                |   Config    |\n\
            # +----------+-------------------------------------------+-------------+\n\
            # |    0..92 | eager short                               | sysv/memory |\n\
            # | 93..8191 | eager copy-in copy-out                    | sysv/memory |\n\
            # |  8K..inf | (?) rendezvous zero-copy read from remote | cma/memory  |\n\
            # +----------+-------------------------------------------+-------------+\n\
            # +------------+--------------------------------------------+---------+\n\
            # | ucp_context_0 intra-node cfg#1                                    |\n\
            # | tagged message by ucp_tag_send*(fast-completion) from host memory |\n\
            # +------------+--------------------------------------------+---------+\n\
            # |   Range    |                Description                 | Config  |\n\
            # +------------+--------------------------------------------+---------+\n\
            # |    0..8184 | eager short                                | tcp/lo  |\n\
            # +------------+--------------------------------------------+---------+\n";
        let tables = protocol_tables(info);
        assert_eq!(tables.len(), 2);
        let t = &tables[0];
        assert_eq!((t.config.as_str(), t.operation.as_str()), ("ucp_context_0 intra-node cfg#1", TAG_SEND_HOST));
        let pick = |size| t.row_for(size).map(|r| (r.protocol.as_str(), r.transport.as_str()));
        assert_eq!(pick(8), Some(("eager short", "sysv/memory")));
        assert_eq!(pick(92), Some(("eager short", "sysv/memory")));
        assert_eq!(pick(93), Some(("eager copy-in copy-out", "sysv/memory")));
        assert_eq!(pick(8192), Some(("(?) rendezvous zero-copy read from remote", "cma/memory")));
        assert_eq!(pick(16 << 20), Some(("(?) rendezvous zero-copy read from remote", "cma/memory")));
        assert_eq!(tables[1].row_for(9000), None, "past the table's last row");

        let logged: String = info
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .map(|l| format!("[1796192583.350174] [vm:7719 :0]   {l}\n"))
            .collect();
        assert_eq!(protocol_tables(&logged), tables);
    }

    #[test]
    fn ranges_read_as_ucx_prints_them() {
        assert_eq!(parse_range("0"), Some((0, Some(0))));
        assert_eq!(parse_range("1..8191"), Some((1, Some(8191))));
        assert_eq!(parse_range("8K..16352"), Some((8192, Some(16352))));
        assert_eq!(parse_range("64K..1M"), Some((65536, Some(1 << 20))));
        assert_eq!(parse_range("16353..inf"), Some((16353, None)));
        assert_eq!(parse_range("8X..9"), None);
        assert_eq!(parse_range("Range"), None);
    }

    #[test]
    fn libraries_are_told_apart_and_two_copies_found() {
        let files: Vec<String> = [
            "/usr/bin/python3.11",
            "/venv/lib/python3.11/site-packages/libucx/lib/libucp.so.0.0.0",
            "/venv/lib/python3.11/site-packages/libucx/lib/libucs.so.0.0.0",
            "/venv/lib/python3.11/site-packages/libucx/lib/libucs_signal.so.0.0.0",
            "/venv/lib/python3.11/site-packages/libucx/lib/ucx/libuct_cma.so.0.0.0",
        ]
        .map(String::from)
        .to_vec();
        let libs = ucx_libraries_in(&files);
        assert_eq!(libs[0], MappedLibrary { name: "libucp", paths: vec![files[1].clone()] });
        assert_eq!(libs[1].paths, vec![files[2].clone()], "libucs_signal is another library");
        assert!(libs[2].paths.is_empty(), "libuct_cma is a transport module, not libuct");
        assert!(!second_ucx(&libs));
        let mut two = files.clone();
        two.push("/opt/ucx/lib/libucp.so.0.0.0".into());
        assert!(second_ucx(&ucx_libraries_in(&two)));
    }

    #[test]
    fn resources_group_by_memory_type() {
        let resources: Vec<String> =
            ["self/memory", "tcp/lo", "cma/memory", "cuda_copy/cuda", "cuda_ipc/cuda", "rc_mlx5/mlx5_0:1"]
                .map(String::from)
                .to_vec();
        let grouped = group_by_memory_type(&["host", "cuda", "cuda-managed"], &resources);
        assert_eq!(grouped[0].1, ["self/memory", "tcp/lo", "cma/memory", "rc_mlx5/mlx5_0:1"]);
        assert_eq!(grouped[1].1, ["cuda_copy/cuda", "cuda_ipc/cuda"]);
        assert_eq!(grouped[2].1, ["cuda_copy/cuda", "cuda_ipc/cuda"]);
    }

    #[test]
    fn the_setting_in_force_is_the_bracketed_one() {
        assert_eq!(bracketed("always [madvise] never\n").as_deref(), Some("madvise"));
        assert_eq!(bracketed("always within_size advise [never] deny force\n").as_deref(), Some("never"));
        assert_eq!(bracketed("madvise"), None);
    }
}
