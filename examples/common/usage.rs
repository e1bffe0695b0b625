//! `--help` for the example binaries: prints the usage and exits 0 before anything runs (no
//! UCX context, no server process).

/// Exits after printing `usage` if the arguments ask for help (`--help` or `-h`).
pub fn exit_if_help(args: &[String], usage: &str) {
    if args.iter().skip(1).any(|a| a == "--help" || a == "-h") {
        println!("{usage}");
        std::process::exit(0);
    }
}
