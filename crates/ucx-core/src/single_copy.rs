//! Same-host single-copy transfers: a large host-memory message between two of our processes
//! on one host is read by the receiver straight from the sender's memory (`process_vm_readv`,
//! as UCX's CMA transport does), while the endpoint with peer error handling carries only a
//! small descriptor and the answer.
//!
//! Why: with peer error handling on (the default) UCX serves two processes on one host with
//! TCP over loopback, because its shared-memory queues cannot survive a writer killed
//! mid-message, and it uses CMA for no lane of such an endpoint. A read here needs no shared
//! queue: a sender that dies makes the read fail (`ESRCH`), and the endpoint's own failure
//! ends everything else, as for any message.
//!
//! This module is the process side; the bytes are [`crate::wire::single_copy`]'s, and the
//! flows that use both are ucx-async's endpoint and the Python bindings' (each sends its
//! [`local_hello`], checks the peer's with [`Peer::verify`], sends large messages as a
//! [`crate::wire::single_copy::Descriptor`] held by a [`Guard`], and reads received
//! descriptors with [`Peer::read`]). [`staging`]: the copy on huge pages that a message on
//! small pages is read from.
//!
//! The guard: a sender may let go of its buffer before the receiver's answer (its send
//! was cancelled, its endpoint failed). It clears the message's guard word first, and the
//! receiver reads the guard word after the bytes: a receiver that finds it unchanged read
//! every byte before the buffer could be released; one that finds it changed discards what
//! it read. Guard words live in memory that is never freed, so the receiver's read of one is
//! always a read of a guard word, and their values are random, so a reused slot or pid never
//! passes for the old one.
use std::io;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

pub mod staging;

use crate::wire::single_copy::{Descriptor, Hello};
use crate::{RecvBuffer, SendBuffer};

/// The smallest message sent by descriptor when nothing else is set (`UCXA_SINGLE_COPY_MIN`).
/// Below it the descriptor's round trip costs more than TCP moving the bytes (docs: the
/// configuration reference has the measurement).
pub const DEFAULT_THRESHOLD: usize = 64 << 10;

/// Why a read of a message its sender let go of (cancelled) fails.
const LET_GO: &str = "the sender let go of the message while it was read";

/// How many single-copy sends a process may have waiting for their answers at once; a send
/// beyond that travels the ordinary way.
const GUARD_SLOTS: usize = 4096;

/// Whether this process offers and accepts single-copy transfers: yes unless
/// `UCXA_SINGLE_COPY` is `0`, `n`, `no`, `off` or `false`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        !matches!(
            std::env::var("UCXA_SINGLE_COPY").map(|v| v.to_ascii_lowercase()).as_deref(),
            Ok("0" | "n" | "no" | "off" | "false")
        )
    })
}

/// Whether an endpoint of `context` offers the path to a peer of ours (the mark in its
/// handshake, a communicator's pair tags): the path is on ([`enabled`]) and UCX would not
/// serve the endpoint by shared memory, which it does where the context has a shared-memory
/// transport ([`crate::Context::has_shared_memory`]) and either the endpoint has no peer
/// error handling or `UCX_MM_ERROR_HANDLING=y` lets shared memory serve those that do.
///
/// The path stands in for TCP only. Without error handling UCX moves host data between two
/// local processes by shared memory and CMA (a single copy already); with
/// `UCX_MM_ERROR_HANDLING=y` (the user's choice of UCX's shared memory with error handling)
/// by shared memory. Taking over there cost time: ucx-async's `bench -t tag_lat -s 1048576`
/// (event mode, the VM, 2026-12-03, at 06efa42, with `UCXA_SINGLE_COPY` 1 and 0) took 221-333
/// us one way by this path against 44-46 us by UCX's shared memory with
/// `UCX_MM_ERROR_HANDLING=y`, and 149-156 against 99-109 us without error handling
/// (docs/log.md, "Against `ucx_perftest`").
pub fn offered(context: &crate::Context, error_handling: bool) -> bool {
    let shared_memory_serves = !error_handling || context.setting("MM_ERROR_HANDLING").is_some_and(ucx_says_yes);
    enabled() && !(shared_memory_serves && context.has_shared_memory())
}

/// [`offered`] for `endpoint`'s context and error handling.
pub fn offered_on(endpoint: &crate::Endpoint) -> bool {
    offered(endpoint.worker().context(), endpoint.error_handling())
}

/// Whether UCX reads `value` as a true boolean (`ucs_config_sscanf_bool`: `y`, `yes` in any
/// case, `on`, `1`).
fn ucx_says_yes(value: &str) -> bool {
    value.eq_ignore_ascii_case("y") || value.eq_ignore_ascii_case("yes") || value == "on" || value == "1"
}

/// The smallest message this process sends by descriptor: `UCXA_SINGLE_COPY_MIN` (bytes)
/// or [`DEFAULT_THRESHOLD`]. An unparsable value is reported once on stderr and ignored.
pub fn threshold() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| bytes_setting("UCXA_SINGLE_COPY_MIN", DEFAULT_THRESHOLD))
}

/// The number of bytes the environment variable `name` gives, or `default` where it is unset
/// or not a number (which is reported on stderr).
pub(crate) fn bytes_setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("ucx-core: {name}={v:?} is not a number of bytes; using {default}");
            default
        }),
    }
}

/// A random non-zero word from the kernel.
fn random_word() -> u64 {
    let mut word = [0u8; 8];
    loop {
        // SAFETY: getrandom writes at most `word.len()` bytes into the array it is given.
        let n = unsafe { libc::getrandom(word.as_mut_ptr().cast(), word.len(), 0) };
        if n == word.len() as isize && word != [0; 8] {
            return u64::from_ne_bytes(word);
        }
    }
}

/// The nonce a peer reads back to prove it can read this process's memory. Its address is
/// sent in the hello, so it lives for the process's life.
static NONCE: AtomicU64 = AtomicU64::new(0);

/// What identifies this process and host, read once.
struct Local {
    pid: u32,
    pid_ns: u64,
    boot_id: [u8; 16],
}

fn local() -> Option<&'static Local> {
    static LOCAL: OnceLock<Option<Local>> = OnceLock::new();
    LOCAL
        .get_or_init(|| {
            let _ = NONCE.compare_exchange(0, random_word(), Ordering::AcqRel, Ordering::Acquire);
            let pid_ns =
                std::fs::metadata("/proc/self/ns/pid").ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m))?;
            let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            Some(Local { pid: std::process::id(), pid_ns, boot_id: parse_uuid(text.trim())? })
        })
        .as_ref()
}

/// The 16 bytes of a UUID in its text form (`8-4-4-4-12` hex digits).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// This process's hello: `None` where it cannot say who it is (no `/proc`), or the path is
/// turned off ([`enabled`]).
pub fn local_hello() -> Option<Hello> {
    if !enabled() {
        return None;
    }
    let l = local()?;
    Some(Hello {
        pid: l.pid,
        pid_ns: l.pid_ns,
        boot_id: l.boot_id,
        probe: NONCE.as_ptr() as u64,
        nonce: NONCE.load(Ordering::Acquire),
    })
}

/// Why a descriptor's bytes were not taken.
#[derive(Debug)]
pub enum ReadError {
    /// The receive's buffer is smaller than the message (`len`).
    TooLarge {
        /// The message's length.
        len: usize,
    },
    /// The read failed (the sender died: `ESRCH`; or its memory was gone: `EFAULT`), or the
    /// guard had changed (the sender let go of the buffer while it was read).
    Unreadable(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TooLarge { len } => write!(f, "a single-copy message of {len} bytes does not fit the receive"),
            ReadError::Unreadable(e) => write!(f, "reading a single-copy message from its sender failed: {e}"),
        }
    }
}

/// A peer process whose memory this process has read (its nonce, through [`Peer::verify`]).
#[derive(Debug)]
pub struct Peer {
    pid: libc::pid_t,
}

/// Reads `len` bytes at `remote` in process `pid` into `local`, whole (the kernel may return
/// fewer at once).
///
/// # Safety
/// `local` must be valid for writes of `len` bytes.
unsafe fn read_remote(pid: libc::pid_t, local: *mut u8, remote: u64, len: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            // SAFETY: done < len, within the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let riov = libc::iovec { iov_base: (remote as usize + done) as *mut libc::c_void, iov_len: len - done };
        // SAFETY: the local iovec is valid for writes (the caller's promise); the remote one is
        // only an address in the other process, which the kernel checks.
        let n = unsafe { libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer's memory ended")),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

impl Peer {
    /// The peer of `hello`, if this process can read its memory: the same host (boot id),
    /// the same pid namespace, and its nonce read back at its address.
    pub fn verify(hello: &Hello) -> Option<Peer> {
        let l = local()?;
        if !enabled() || hello.boot_id != l.boot_id || hello.pid_ns != l.pid_ns {
            return None;
        }
        let pid = libc::pid_t::try_from(hello.pid).ok()?;
        let mut word = [0u8; 8];
        // SAFETY: `word` is 8 writable bytes.
        unsafe { read_remote(pid, word.as_mut_ptr(), hello.probe, 8) }.ok()?;
        (u64::from_ne_bytes(word) == hello.nonce).then_some(Peer { pid })
    }

    /// The peer's pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Reads the bytes `desc` describes into `buf`, then checks the sender's guard word.
    /// Returns the length read.
    pub fn read(&self, desc: &Descriptor, buf: &mut [u8]) -> Result<usize, ReadError> {
        // SAFETY: `buf` is valid for writes of its length.
        unsafe { self.read_raw(desc, buf.as_mut_ptr(), buf.len()) }
    }

    /// [`Peer::read`] into `capacity` bytes at `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `capacity` bytes for the duration of the call.
    pub unsafe fn read_raw(&self, desc: &Descriptor, dst: *mut u8, capacity: usize) -> Result<usize, ReadError> {
        let len = usize::try_from(desc.len).unwrap_or(usize::MAX);
        if len > capacity {
            return Err(ReadError::TooLarge { len });
        }
        if desc.pid != self.pid as u32 {
            return Err(ReadError::Unreadable(io::Error::new(
                io::ErrorKind::InvalidData,
                "the descriptor names another process than the endpoint's peer",
            )));
        }
        // SAFETY: len <= capacity, which the caller promises is writable.
        unsafe { read_remote(self.pid, dst, desc.addr, len) }.map_err(|e| {
            ReadError::Unreadable(match e.raw_os_error() {
                // The sender unmapped the buffer: it let go of it before the answer.
                Some(libc::EFAULT) => io::Error::new(io::ErrorKind::Interrupted, LET_GO),
                _ => e,
            })
        })?;
        fence(Ordering::SeqCst);
        let mut word = [0u8; 8];
        // SAFETY: `word` is 8 writable bytes.
        unsafe { read_remote(self.pid, word.as_mut_ptr(), desc.guard_addr, 8) }.map_err(ReadError::Unreadable)?;
        if u64::from_ne_bytes(word) != desc.guard {
            return Err(ReadError::Unreadable(io::Error::new(io::ErrorKind::Interrupted, LET_GO)));
        }
        Ok(len)
    }
}

/// The guard words, never freed (see the module doc), and which are free.
struct Guards {
    words: &'static [AtomicU64],
    free: Mutex<Vec<usize>>,
}

fn guards() -> &'static Guards {
    static GUARDS: OnceLock<Guards> = OnceLock::new();
    GUARDS.get_or_init(|| {
        let words: Vec<AtomicU64> = (0..GUARD_SLOTS).map(|_| AtomicU64::new(0)).collect();
        Guards { words: Vec::leak(words), free: Mutex::new((0..GUARD_SLOTS).rev().collect()) }
    })
}

/// A sender's guard word for one message in flight: set while the receiver may read the
/// message's buffer, cleared when dropped. Drop it before the buffer.
#[derive(Debug)]
pub struct Guard {
    slot: usize,
    value: u64,
    /// The message's copy on huge pages, if it was staged: released after the word is cleared.
    staged: Option<staging::Staged>,
}

impl Guard {
    /// A guard, or `None` when every slot is taken (the message then goes the ordinary way).
    pub fn new() -> Option<Guard> {
        let g = guards();
        let slot = g.free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        let value = random_word();
        g.words[slot].store(value, Ordering::SeqCst);
        Some(Guard { slot, value, staged: None })
    }

    /// The descriptor of `len` bytes at `addr`, answered on sequence number `seq`, under this
    /// guard; `None` where this process cannot say who it is.
    pub fn descriptor(&self, seq: u64, addr: u64, len: usize) -> Option<Descriptor> {
        let l = local()?;
        Some(Descriptor {
            seq,
            addr,
            len: len as u64,
            guard_addr: guards().words[self.slot].as_ptr() as u64,
            guard: self.value,
            pid: l.pid,
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let g = guards();
        g.words[self.slot].store(0, Ordering::SeqCst);
        g.free.lock().unwrap_or_else(|p| p.into_inner()).push(self.slot);
    }
}

/// How many messages of an endpoint travelled by single copy, and which ways it is on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Whether this side's large sends go by single copy (the peer can read this process).
    pub sending: bool,
    /// Whether this side reads the peer's large messages from its memory.
    pub receiving: bool,
    /// Messages this side sent as descriptors, answered.
    pub sent: u64,
    /// Messages this side read from the peer's memory.
    pub received: u64,
    /// Of the messages this side described, those it first copied onto huge pages
    /// ([`staging`]).
    pub staged: u64,
}

/// One endpoint's single-copy state, for the flows that drive it (ucx-async's endpoint, the
/// Python bindings'): which ways it is on, the sequence of its descriptors, its answer tags,
/// and what crossed it. Every rule of the path that is not bytes lives here.
#[derive(Debug, Default)]
pub struct Link {
    /// The peer, once this side has read its nonce and told it to send descriptors.
    rx: OnceLock<Peer>,
    /// Set once the peer said it can read this process.
    tx: std::sync::atomic::AtomicBool,
    seq: AtomicU64,
    /// Where hellos and verdicts arrive, and where ours go.
    hello_in: u64,
    hello_out: u64,
    /// Where the answers to our descriptors arrive, and where we answer the peer's.
    acks_in: u64,
    acks_out: u64,
    sent: AtomicU64,
    received: AtomicU64,
    staged: AtomicU64,
}

impl Link {
    /// The link of an endpoint that receives on `msg_recv` and sends on `msg_send`.
    pub fn new(msg_recv: u64, msg_send: u64) -> Link {
        use crate::wire::single_copy::{ack_tag, hello_tag};
        Link {
            hello_in: hello_tag(msg_recv),
            hello_out: hello_tag(msg_send),
            acks_in: ack_tag(msg_recv),
            acks_out: ack_tag(msg_send),
            ..Default::default()
        }
    }

    /// The tags hellos and verdicts arrive on and go to.
    pub fn hello_tags(&self) -> (u64, u64) {
        (self.hello_in, self.hello_out)
    }

    /// This side's hello, as bytes (a process that cannot say who it is sends one of no
    /// version, which the peer refuses).
    pub fn hello(&self) -> [u8; Hello::LEN] {
        local_hello().map_or([0u8; Hello::LEN], |h| h.encode())
    }

    /// Takes the peer's hello; returns the verdict to send back (yes: this side can read it,
    /// and from now on reads what it describes).
    pub fn take_hello(&self, bytes: &[u8]) -> crate::wire::single_copy::Verdict {
        let peer = Hello::decode(bytes).ok().and_then(|h| Peer::verify(&h));
        let yes = peer.is_some();
        if let Some(p) = peer {
            let _ = self.rx.set(p);
        }
        crate::wire::single_copy::Verdict(yes)
    }

    /// Takes the peer's verdict: yes turns this side's single-copy sends on.
    pub fn take_verdict(&self, bytes: &[u8]) {
        if crate::wire::single_copy::Verdict::decode(bytes).is_ok_and(|v| v.0) {
            self.tx.store(true, Ordering::Release);
        }
    }

    /// Whether a message of `len` bytes of `memory` goes by single copy.
    pub fn sends(&self, len: usize, memory: crate::MemoryType) -> bool {
        memory == crate::MemoryType::Host && len >= threshold() && self.tx.load(Ordering::Acquire)
    }

    /// Whether received messages may be descriptors.
    pub fn receives(&self) -> bool {
        self.rx.get().is_some()
    }

    /// The descriptor of the `len` bytes at `addr`, the guard to hold until the answer (drop
    /// it before the bytes go), and the tag the answer arrives on. `None`: no guard is free,
    /// send the ordinary way. A message on 4 KiB pages is first copied onto huge pages, which
    /// the peer reads up to 3.5 times faster ([`staging`]); the guard holds the copy.
    ///
    /// # Safety
    /// `addr..addr + len` is host memory that stays readable, and unchanged, for this call.
    pub unsafe fn describe(&self, addr: *const u8, len: usize) -> Option<(Descriptor, Guard, u64)> {
        let mut guard = Guard::new()?;
        // A process that cannot say who it is describes nothing (`Guard::descriptor`).
        local()?;
        // SAFETY: the caller's promise.
        let data = unsafe { std::slice::from_raw_parts(addr, len) };
        guard.staged = staging::stage(data);
        if guard.staged.is_some() {
            self.staged.fetch_add(1, Ordering::Relaxed);
        }
        let read_at = guard.staged.as_ref().map_or(addr, |s| s.as_ptr());
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        let desc = guard.descriptor(seq, read_at as u64, len)?;
        Some((desc, guard, self.acks_in ^ seq))
    }

    /// Judges the answer to descriptor `desc` (`bytes`,
    /// [`Ack::LEN`](crate::wire::single_copy::Ack::LEN) of them): `Ok` when the peer took the
    /// bytes, or refused them only as too large for its receive (it reports the truncation);
    /// an error naming why otherwise.
    pub fn answered(&self, desc: &Descriptor, bytes: &[u8]) -> crate::Result<()> {
        use crate::wire::single_copy::{Ack, AckStatus};
        match Ack::decode(bytes) {
            Ok(Ack { seq, status: AckStatus::Taken | AckStatus::TooLarge }) if seq == desc.seq => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Ok(Ack { status: AckStatus::Unreadable, .. }) => Err(crate::Error::with_detail(
                "send",
                crate::Status::IoError,
                "the peer could not read the message from this process's memory",
            )),
            _ => Err(crate::Error::with_detail("send", crate::Status::InvalidParam, "a bad single-copy answer")),
        }
    }

    /// A finished receive's completion `c` into `capacity` bytes at `buf`, read through from
    /// the sender's memory if what arrived is a descriptor; its sender is answered on `ep`
    /// either way. Not a descriptor (or not receiving): `c` as it is.
    ///
    /// # Safety
    /// `buf` must be host memory valid for reads and writes of `capacity` bytes, which UCX no
    /// longer writes.
    unsafe fn read_through(
        &self,
        ep: &crate::Endpoint,
        c: crate::Completion,
        buf: *mut u8,
        capacity: usize,
    ) -> Result<crate::Completion, ReadError> {
        use crate::wire::single_copy::{Ack, AckStatus};
        let Some(peer) = self.rx.get() else { return Ok(c) };
        if c.length != Descriptor::LEN || capacity < Descriptor::LEN {
            return Ok(c);
        }
        // SAFETY: UCX wrote `c.length` bytes there, within `capacity` (the caller's promise).
        let head = unsafe { std::slice::from_raw_parts(buf, Descriptor::LEN) };
        let Some(desc) = Descriptor::recognise(head) else { return Ok(c) };
        // SAFETY: the caller's promise.
        let read = unsafe { peer.read_raw(&desc, buf, capacity) };
        let status = match &read {
            Ok(_) => {
                self.received.fetch_add(1, Ordering::Relaxed);
                AckStatus::Taken
            }
            Err(ReadError::TooLarge { .. }) => AckStatus::TooLarge,
            Err(ReadError::Unreadable(_)) => AckStatus::Unreadable,
        };
        // The answer goes on its own; if the peer has gone, its wait has ended already.
        let _ = ep.tag_send_owned(Ack { seq: desc.seq, status }.encode(), self.acks_out ^ desc.seq);
        read.map(|length| crate::Completion { length, ..c })
    }

    /// Finishes a receive made into `r` ([`Receive`]): for host memory (device memory keeps
    /// `c` as it is), a descriptor that arrived is read from the sender's memory into the
    /// buffer and its sender answered; where UCX received into the room, what arrived is copied
    /// into the buffer, or the receive fails as too large for it.
    ///
    /// # Safety
    /// The receive into `r` has finished: UCX no longer writes its memory.
    pub unsafe fn finish<B: RecvBuffer>(
        &self,
        ep: &crate::Endpoint,
        c: crate::Completion,
        r: &mut Receive<B>,
    ) -> Result<crate::Completion, ReadError> {
        let Some(room) = r.room.as_mut() else {
            if r.buf.memory_type() != crate::MemoryType::Host {
                return Ok(c);
            }
            let (buf, capacity) = (r.buf.as_mut_ptr(), r.buf.byte_len());
            // SAFETY: `buf` is the receive's host memory, `capacity` bytes, finished (the
            // caller's promise).
            return unsafe { self.read_through(ep, c, buf, capacity) };
        };
        // SAFETY: the room is host memory of `Descriptor::LEN` bytes, finished.
        let c = unsafe { self.read_through(ep, c, room.as_mut_ptr(), Descriptor::LEN) }?;
        if c.length > r.buf.byte_len() {
            return Err(ReadError::TooLarge { len: c.length });
        }
        // SAFETY: the buffer is host memory (`Receive::new`) of at least `c.length` writable
        // bytes, and the room holds `c.length` bytes; they do not overlap (the room is ours).
        unsafe { std::ptr::copy_nonoverlapping(room.as_ptr(), r.buf.as_mut_ptr(), c.length) };
        Ok(c)
    }

    /// Which ways the link is on, and how many messages crossed it.
    pub fn counts(&self) -> Counts {
        Counts {
            sending: self.tx.load(Ordering::Acquire),
            receiving: self.receives(),
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            staged: self.staged.load(Ordering::Relaxed),
        }
    }
}

/// A receive's buffer on an endpoint with a link. A host buffer of fewer than
/// [`Descriptor::LEN`] bytes lends UCX a descriptor's room in its place: a descriptor cut
/// short there could not be answered, and its sender would wait until the endpoint ended;
/// received whole, it is answered "too large" and the receive fails as truncated, as over UCX.
/// [`Link::finish`] completes the receive (and copies from the room).
pub struct Receive<B> {
    buf: B,
    /// Inline: a borrowed receive keeps it in its future (pinned), an owned one in the
    /// operation's box, so it does not move while UCX may write it.
    room: Option<[u8; Descriptor::LEN]>,
}

impl<B: RecvBuffer> Receive<B> {
    /// `buf` as a receive on a linked endpoint.
    pub fn new(buf: B) -> Receive<B> {
        let small = buf.byte_len() < Descriptor::LEN && buf.memory_type() == crate::MemoryType::Host;
        Receive { room: small.then_some([0u8; Descriptor::LEN]), buf }
    }

    /// The caller's buffer.
    pub fn into_inner(self) -> B {
        self.buf
    }
}

// SAFETY: the room is `Descriptor::LEN` initialised host bytes owned here; otherwise `buf`'s
// memory, as `B` promises. Either lives as long as `self`.
unsafe impl<B: RecvBuffer> SendBuffer for Receive<B> {
    fn as_ptr(&self) -> *const u8 {
        self.room.as_ref().map_or(self.buf.as_ptr(), |r| r.as_ptr())
    }
    fn byte_len(&self) -> usize {
        self.room.as_ref().map_or(self.buf.byte_len(), |r| r.len())
    }
    fn memory_type(&self) -> crate::MemoryType {
        self.room.as_ref().map_or(self.buf.memory_type(), |_| crate::MemoryType::Host)
    }
}

// SAFETY: as above, writable: the room is ours, `buf` is `B`'s writable memory.
unsafe impl<B: RecvBuffer> RecvBuffer for Receive<B> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self.room.as_mut() {
            Some(r) => r.as_mut_ptr(),
            None => self.buf.as_mut_ptr(),
        }
    }
}

impl ReadError {
    /// The error a receive reports for it, under operation name `op`.
    pub fn into_error(self, op: &'static str) -> crate::Error {
        match self {
            ReadError::TooLarge { len } => crate::Error::with_detail(
                op,
                crate::Status::MessageTruncated,
                format!("the message of {len} bytes does not fit the receive"),
            ),
            ReadError::Unreadable(io) => crate::Error::with_detail(op, crate::Status::IoError, io.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_booleans_read_as_ucx_reads_them() {
        for yes in ["y", "Y", "yes", "YES", "on", "1"] {
            assert!(ucx_says_yes(yes), "{yes}");
        }
        for no in ["n", "no", "off", "0", "ON", "true", "", "try"] {
            assert!(!ucx_says_yes(no), "{no}");
        }
    }

    #[test]
    fn the_path_is_offered_only_where_ucx_would_use_tcp() {
        if ["UCXA_SINGLE_COPY", "UCX_MM_ERROR_HANDLING", "UCX_TLS"].iter().any(|v| std::env::var_os(v).is_some()) {
            eprintln!("skipped: UCXA_SINGLE_COPY, UCX_MM_ERROR_HANDLING or UCX_TLS is set");
            return;
        }
        let plain = crate::Context::builder().option("NET_DEVICES", "lo").build().unwrap();
        let mm =
            crate::Context::builder().option("NET_DEVICES", "lo").option("MM_ERROR_HANDLING", "y").build().unwrap();
        assert!(offered(&plain, true));
        assert!(!offered(&plain, false), "without error handling UCX has shared memory and CMA");
        assert!(!offered(&mm, true), "with UCX_MM_ERROR_HANDLING=y UCX has shared memory");
        assert!(!offered(&mm, false));
        // Where UCX_TLS leaves shared memory out, UCX uses TCP either way.
        let tcp = crate::Context::builder()
            .option("NET_DEVICES", "lo")
            .option("TLS", "tcp")
            .option("MM_ERROR_HANDLING", "y")
            .build()
            .unwrap();
        assert!(plain.has_shared_memory() && mm.has_shared_memory() && !tcp.has_shared_memory());
        assert!(offered(&tcp, true) && offered(&tcp, false));
    }

    #[test]
    fn a_process_verifies_itself_and_reads_a_guarded_message() {
        let hello = local_hello().expect("this test runs where /proc says who we are");
        let peer = Peer::verify(&hello).expect("a process can read its own memory");
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let guard = Guard::new().unwrap();
        let desc = guard.descriptor(1, data.as_ptr() as u64, data.len()).unwrap();
        let mut got = vec![0u8; data.len() + 10];
        assert_eq!(peer.read(&desc, &mut got).unwrap(), data.len());
        assert_eq!(&got[..data.len()], &data[..]);
        // Too small a receive reads nothing.
        assert!(matches!(peer.read(&desc, &mut got[..10]), Err(ReadError::TooLarge { len: 1_000_000 })));
        // Once the guard is dropped, a read is refused.
        drop(guard);
        assert!(matches!(peer.read(&desc, &mut got), Err(ReadError::Unreadable(_))));
    }

    #[test]
    fn a_wrong_nonce_or_another_host_is_refused() {
        let hello = local_hello().unwrap();
        assert!(Peer::verify(&Hello { nonce: hello.nonce ^ 1, ..hello }).is_none());
        assert!(Peer::verify(&Hello { boot_id: [0; 16], ..hello }).is_none());
        assert!(Peer::verify(&Hello { pid_ns: hello.pid_ns ^ 1, ..hello }).is_none());
    }

    #[test]
    fn uuids_parse() {
        assert_eq!(parse_uuid("00112233-4455-6677-8899-aabbccddeeff").unwrap()[15], 0xff);
        assert!(parse_uuid("not a uuid").is_none());
    }
}
