//! A rank that leaves its job without a word (its communicator dropped), for the tests of what
//! the other ranks see then.

use ucx_async::Communicator;

/// After a barrier: every rank but `leaver` tells `leaver` it is past the barrier, and
/// `leaver` waits to hear from them all. Dropped sooner, `leaver`'s communicator could reset
/// the connections under its own barrier messages, and the others' barrier would fail instead
/// of the call under test. Returns whether this rank is `leaver`, which may then go.
pub async fn others_past_the_barrier(c: &Communicator, leaver: usize) -> bool {
    const TAG: u32 = 7;
    if c.rank() != leaver {
        c.send(leaver, &[0u8; 0][..], TAG).await.unwrap();
        return false;
    }
    for r in (0..c.size()).filter(|&r| r != leaver) {
        c.recv(r, &mut [0u8; 0][..], TAG).await.unwrap();
    }
    true
}
