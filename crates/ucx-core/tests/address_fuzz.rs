//! Worker addresses from untrusted bytes: real addresses (both formats UCX writes) are
//! accepted and connect; random bytes, truncations and mutated real addresses are either
//! refused with a reason or, when accepted, given to `ucp_ep_create` without aborting the
//! process (the bug: one flipped byte made UCX abort in `address.c`).
//!
//! Cases per run: `UCXA_TEST_FUZZ_CASES` (default 20 000; `scripts/reliability.sh`: 1 000 000).
//! Endpoints are created only for accepted inputs, on a context limited to shared memory and
//! `self`, so no fuzzed address can make UCX open a network connection.
#[path = "common/fuzz.rs"]
mod fuzz;
use fuzz::{cases, Rng};
use ucx_core::wire::worker_address::{validate, AddressError};
use ucx_core::*;

fn context(version: &str, tls: &str) -> Context {
    Context::builder()
        .option("NET_DEVICES", "lo")
        .option("TLS", tls)
        .option("MM_ERROR_HANDLING", "y")
        .option("ADDRESS_VERSION", version)
        .build()
        .unwrap()
}

/// Live workers (kept, so that endpoints to their addresses can connect) and their
/// addresses: v1 and v2, with the network transports and with shared memory only.
fn real_addresses() -> (Vec<Worker>, Vec<Vec<u8>>) {
    let (mut workers, mut out) = (Vec::new(), Vec::new());
    for version in ["v1", "v2"] {
        for tls in ["all", "self,sm"] {
            let ctx = context(version, tls);
            let w = Worker::new(&ctx).unwrap();
            out.push(w.address().unwrap().as_bytes().to_vec());
            workers.push(w);
        }
    }
    (workers, out)
}

#[test]
fn real_addresses_are_accepted_and_connect() {
    for (i, bytes) in real_addresses().1.iter().enumerate() {
        assert_eq!(validate(bytes), Ok(()), "address {i} ({} bytes, first byte {:#x})", bytes.len(), bytes[0]);
    }
    // An accepted copy connects and carries a message (loopback::worker_address_endpoint covers
    // more; this proves the padded copy is what UCX gets and it still works).
    let ctx = context("v2", "self,sm");
    let (a, b) = (Worker::new(&ctx).unwrap(), Worker::new(&ctx).unwrap());
    let addr = WorkerAddress::from_bytes(b.address().unwrap().as_bytes()).unwrap();
    let ep = Endpoint::connect_to_worker(&a, &addr, EndpointParams::default()).unwrap();
    let mut buf = [0u8; 2];
    let r = b.tag_recv(&mut buf, 9, FULL_MASK).unwrap();
    let s = ep.tag_send(b"ok", 9).unwrap();
    for op in [s, r] {
        if let Submitted::InFlight(r) = op {
            while !r.is_complete() {
                a.progress();
                b.progress();
            }
            r.wait().unwrap();
        }
    }
    assert_eq!(&buf, b"ok");
}

#[test]
fn errors_name_what_is_wrong() {
    assert_eq!(WorkerAddress::from_bytes(&[]).unwrap_err().to_string(), "a UCX worker address cannot be empty");
    let e = WorkerAddress::from_bytes(&[0x07, 1, 2]).unwrap_err();
    assert_eq!(e, AddressError::UnknownVersion(7));
    let real = &real_addresses().1[0];
    let e = WorkerAddress::from_bytes(&real[..real.len() / 2]).unwrap_err();
    assert!(e.to_string().starts_with("the worker address ends inside its"), "{e}");
    let err: Error = e.into();
    assert_eq!(err.status(), Status::InvalidAddr);
}

/// Mutations of real addresses and random bytes: none may panic the validator; every accepted
/// one goes to `ucp_ep_create`, which must not abort (an abort ends this test process).
#[test]
fn fuzzed_addresses_never_abort() {
    let (_live, real) = real_addresses();
    let ctx = context("v1", "self,sm");
    let worker = Worker::new(&ctx).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut connected) = (0usize, 0usize);
    for i in 0..cases() {
        let base = &real[i % real.len()];
        let input: Vec<u8> = match rng.below(6) {
            // Random bytes of a random length.
            0 => (0..rng.below(512)).map(|_| rng.next() as u8).collect(),
            // A truncation.
            1 => base[..rng.below(base.len())].to_vec(),
            // Bytes appended.
            2 => {
                let mut v = base.clone();
                v.extend((0..1 + rng.below(16)).map(|_| rng.next() as u8));
                v
            }
            // One to four bytes overwritten, or one bit flipped.
            3 | 4 => {
                let mut v = base.clone();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(v.len());
                    v[at] = rng.next() as u8;
                }
                v
            }
            _ => {
                let mut v = base.clone();
                let at = rng.below(v.len());
                v[at] ^= 1 << rng.below(8);
                v
            }
        };
        let Ok(addr) = WorkerAddress::from_bytes(&input) else { continue };
        accepted += 1;
        // Creating an endpoint is slow (a UCX wireup); a sample of the accepted ones suffices
        // for the long run, all of them for the short one.
        if accepted > 2_000 && rng.below(100) != 0 {
            continue;
        }
        if let Ok(path) = std::env::var("UCXA_TEST_FUZZ_LOG") {
            // The input about to reach UCX, for reproducing a crash.
            std::fs::write(path, &input).unwrap();
        }
        if let Ok(ep) = Endpoint::connect_to_worker(&worker, &addr, EndpointParams::default()) {
            connected += 1;
            ep.force_close_now();
        }
        worker.progress();
    }
    eprintln!("fuzzed {} addresses: {accepted} accepted, {connected} connected, no abort", cases());
    assert!(accepted > 0, "the mutations never produced a valid address: the test tests nothing");
}

/// Replays one input saved by `UCXA_TEST_FUZZ_LOG` (`UCXA_TEST_FUZZ_INPUT=path cargo test ... replay`).
#[test]
fn replay() {
    let Ok(path) = std::env::var("UCXA_TEST_FUZZ_INPUT") else { return };
    let input = std::fs::read(path).unwrap();
    let (_live, _) = real_addresses();
    let worker = Worker::new(&context("v1", "self,sm")).unwrap();
    let addr = WorkerAddress::from_bytes(&input).unwrap();
    let _ = Endpoint::connect_to_worker(&worker, &addr, EndpointParams::default());
}
