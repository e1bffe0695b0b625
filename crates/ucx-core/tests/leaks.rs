//! No UCX object outlives its owner and none leaks: parents stay alive while children use
//! them, and once every handle is dropped the live-object counts are back to zero.
//!
//! One test per binary, so the process-wide counts see only this scenario.
mod common;

use std::sync::{Arc, Mutex};

use common::*;
use ucx_core::live::{self, Kind};
use ucx_core::*;

#[test]
fn every_ucx_object_is_destroyed_exactly_once() {
    let before = live::snapshot();
    assert!(before.iter().all(|&(_, n)| n == 0), "{before:?}");
    {
        let ctx = context();
        let p = connected_pair(&ctx);
        // Children keep their parents: drop our context handle and the listener first.
        drop(ctx);
        let Pair { server, client, server_ep, client_ep, listener } = p;
        drop(listener);
        assert_eq!(live::count(Kind::Context), 1);
        assert_eq!(live::count(Kind::Worker), 2);
        assert_eq!(live::count(Kind::Endpoint), 2);

        // Exercise every object kind once.
        let got: Arc<Mutex<Vec<AmMessage>>> = Arc::default();
        let g = got.clone();
        server.set_am_handler(1, move |m| g.lock().unwrap().push(m)).unwrap();
        let data = pattern(200_000, 1);
        // Rendezvous, forced: by size alone UCX may send 200 kB eagerly (with 256 KiB TCP segments).
        let rndv = AmSendOptions { proto: AmProto::Rendezvous, ..AmSendOptions::default() };
        let s = client_ep.am_send(1, &[1, 2], &data[..], rndv).unwrap();
        progress_until(&[&server, &client], "an AM", || !got.lock().unwrap().is_empty());
        assert_eq!(live::count(Kind::AmData), 1, "a rendezvous message held");
        got.lock().unwrap().clear();
        let _ = try_wait_on(&[&server, &client], s);

        let mem = MemoryHandle::allocate(server.context(), 4096).unwrap();
        let rkey = client_ep.unpack_rkey(&mem.pack_rkey().unwrap()).unwrap();
        assert_eq!((live::count(Kind::Memory), live::count(Kind::RemoteKey)), (1, 1));
        wait_on(&[&server, &client], client_ep.put(&[1u8; 64][..], mem.address(), &rkey).unwrap());
        let mut pending = [0u8; 8];
        let r = server.tag_recv(&mut pending[..], 404, FULL_MASK).unwrap();
        assert_eq!(live::count(Kind::Request), 1);
        drop(r);

        // The worker outlives its endpoint's user handle; the rkey keeps its endpoint.
        drop(client_ep);
        assert_eq!(live::count(Kind::Endpoint), 2, "the rkey holds the client endpoint");
        drop(rkey);
        drop(mem);
        drop(server_ep);
        drop((server, client));
    }
    let after = live::snapshot();
    assert!(after.iter().all(|&(_, n)| n == 0), "leaked: {after:?}");
}
