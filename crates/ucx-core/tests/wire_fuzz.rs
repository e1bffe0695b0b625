//! Every decoder of peer input, fed random and mutated bytes: none may panic, and each
//! accepts exactly what its encoder writes (a decoded value re-encodes to the same bytes).
//! Worker addresses have their own test (`address_fuzz.rs`, which also creates endpoints).
//!
//! Cases per decoder: `UCXA_TEST_FUZZ_CASES` (default 20 000; `scripts/reliability.sh`: 1 000 000).
#[path = "common/fuzz.rs"]
mod fuzz;
use fuzz::{cases, Rng};
use ucx_core::wire::{
    alltoallv, am_header, bootstrap, ctrl::CtrlMsg, detect, multi_frame, multirail, obj_len, worker_address, PeerInfo,
    UcxxPeerInfo, DETECT_LEN,
};

#[test]
fn decoders_never_panic_and_round_trip() {
    let mut rng = Rng(0x005e_ed0f_f022);
    let mut accepted = [0usize; 5];
    for _ in 0..cases() {
        let b = rng.bytes(PeerInfo::LEN);
        if let Ok(p) = PeerInfo::decode(&b) {
            assert_eq!(&p.encode()[..], &b[..]);
            accepted[0] += 1;
        }
        let b = rng.bytes(UcxxPeerInfo::LEN);
        if let Ok(p) = UcxxPeerInfo::decode(&b) {
            assert_eq!(&p.encode()[..], &b[..]);
            accepted[1] += 1;
        }
        let b = rng.bytes(CtrlMsg::LEN);
        if let Ok(m) = CtrlMsg::decode(&b) {
            assert_eq!(&m.encode()[..], &b[..]);
            accepted[2] += 1;
        }
        let b = rng.bytes(am_header::LEN);
        if let Ok(m) = am_header::decode(&b) {
            assert_eq!(&am_header::encode(m)[..], &b[..]);
            accepted[3] += 1;
        }
        let b = rng.bytes(obj_len::LEN);
        if let Ok(n) = obj_len::decode(&b) {
            assert_eq!(&obj_len::encode(n)[..], &b[..]);
            accepted[4] += 1;
        }
        let mut first = [0u8; DETECT_LEN];
        first.iter_mut().for_each(|x| *x = rng.next() as u8);
        let _ = detect(&first);
        let _ = worker_address::validate(&rng.bytes(64));
        // UCXX's multi-frame header: random bytes and a valid header with bytes changed; what
        // decodes re-encodes to an equivalent header.
        let mut h = multi_frame::encode_all(&[multi_frame::Frame { cuda: true, len: rng.next() }])[0];
        for _ in 0..4 {
            let at = (rng.next() as usize) % multi_frame::LEN;
            h[at] = rng.next() as u8;
        }
        for candidate in [&h[..], &rng.bytes(multi_frame::LEN)[..]] {
            if let Ok((_, frames)) = multi_frame::decode(candidate) {
                assert!(frames.len() <= multi_frame::FRAMES);
                let again = multi_frame::encode_all(&frames);
                assert_eq!(multi_frame::decode(&again[0]).map(|d| d.1), Ok(frames));
            }
        }
        // alltoallv's announcement: random bytes; what decodes covers its part exactly.
        if let Ok(a) = alltoallv::Announce::decode(&rng.bytes(12)) {
            assert_eq!(alltoallv::Announce::decode(&a.encode()), Ok(a));
            if a.messages() > 0 {
                assert_eq!(a.range(a.messages() - 1).end, a.len);
            }
        }
        // The bootstrap's messages: random bytes, and a valid table with one byte changed.
        let _ = bootstrap::Hello::decode(&rng.bytes(32));
        let _ = bootstrap::decode_answer(&rng.bytes(48));
        let mut t = bootstrap::encode_table(&[rng.bytes(9), rng.bytes(3)]);
        let i = rng.next() as usize % t.len();
        t[i] = rng.next() as u8;
        if let Ok(bootstrap::Answer::Table(table)) = bootstrap::decode_answer(&t) {
            assert_eq!(bootstrap::encode_table(&table), t);
        }
        // Multi-rail: random hellos and headers, and a valid header with one byte changed.
        let b = rng.bytes(multirail::HELLO_LEN);
        if let Ok(h) = multirail::Hello::decode(&b) {
            assert_eq!(&h.encode()[..], &b[..]);
        }
        let _ = multirail::Header::decode(&rng.bytes(34));
        let (rails, stages) = (1 + rng.next() as u16 % 4, 1 + rng.next() as u16 % 4);
        let shares: Vec<u64> = (0..rails).map(|_| rng.next() % 1000).collect();
        let header = multirail::Header { total: shares.iter().sum(), stages, shares };
        let mut h = header.encode();
        let i = rng.next() as usize % h.len();
        h[i] = rng.next() as u8;
        if let Ok(d) = multirail::Header::decode(&h) {
            assert_eq!(d.encode(), h);
            let layout = d.layout();
            assert_eq!(layout.iter().map(|c| c.len).sum::<u64>(), d.total);
            assert!(layout.windows(2).all(|w| w[0].offset + w[0].len == w[1].offset));
        }
    }
    // Random bytes of the right size carry no valid checksum: those decoders refuse them; the
    // others take any value of the right size.
    assert!(accepted[2] > 0 && accepted[3] > 0 && accepted[4] > 0, "{accepted:?}");
}

#[test]
fn a_handshake_with_any_bit_flipped_is_refused() {
    let info = PeerInfo { msg_tag: 0x1234, ctrl_tag: 0x5678 };
    let bytes = info.encode();
    for bit in 0..bytes.len() * 8 {
        let mut b = bytes;
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(PeerInfo::decode(&b).is_err(), "bit {bit}");
    }
}
