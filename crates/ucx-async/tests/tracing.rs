//! With the `tracing` feature, connect and accept run in spans and report their outcome, and
//! close, abort and a peer's failure are events (run: `cargo test -p ucx-async --features tracing`).
#![cfg(feature = "tracing")]
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use ucx_async::core::Context;
use ucx_async::{ConnectOptions, Endpoint, Listener, ProgressMode, Worker};

/// Records span names with their fields, and event messages, as lines of text.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut text = Text(format!("span {}", span.metadata().name()));
        span.record(&mut text);
        let mut lines = self.0.lock().unwrap();
        lines.push(text.0);
        Id::from_u64(lines.len() as u64)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut text = Text(format!("event {}", event.metadata().level()));
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    fn has(&self, needle: &[&str]) -> bool {
        self.0.lock().unwrap().iter().any(|l| needle.iter().all(|n| l.contains(n)))
    }
}

#[tokio::test]
async fn connect_accept_close_abort_and_errors_are_traced() {
    let rec = Recorder::default();
    let _guard = tracing::subscriber::set_default(rec.clone());
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let (ws, wc) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), Worker::new(&ctx, ProgressMode::Event).unwrap());
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr();
    let (server, client) = tokio::join!(listener.accept(), Endpoint::connect(&wc, addr));
    let (server, client) = (server.unwrap(), client.unwrap());
    assert!(rec.has(&["span ucx_endpoint", "op=\"connect\"", &addr.to_string()]), "{:?}", rec.0);
    assert!(rec.has(&["span ucx_endpoint", "op=\"accept\"", "127.0.0.1"]), "{:?}", rec.0);
    assert!(rec.has(&["connect done", "UcxPy"]), "{:?}", rec.0);
    assert!(rec.has(&["accept done"]), "{:?}", rec.0);

    client.close().await.unwrap();
    assert!(rec.has(&["closing endpoint"]), "{:?}", rec.0);
    server.abort();
    assert!(rec.has(&["aborting endpoint"]), "{:?}", rec.0);

    // A failed connect is a warning naming the error.
    let nobody = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let opts = ConnectOptions { timeout: Duration::from_millis(200), ..Default::default() };
    let e = Endpoint::connect_with(&wc, nobody.local_addr(), opts).await.unwrap_err();
    assert!(rec.has(&["event WARN", "connect failed", &e.to_string()]), "{:?}", rec.0);
}
