//! UCX-Py's CuPy echo, in Rust: the client sends a device buffer of zeros, the server receives
//! it into device memory, adds one to every byte on the GPU, and sends it back; the client
//! checks that every byte is 1. Both in one process here, over 127.0.0.1, with the CUDA
//! memory type passed to UCX. Without a CUDA device it says so and exits with status 2.
//!
//! Run: `cargo run --release -p ucx-async --features cuda --example echo_cuda`
use cust::function::{BlockSize, GridSize};
use cust::memory::{CopyDestination, DeviceBuffer};
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

/// `increment(data, n)`: data[i] += 1 for i < n. Hand-written PTX, so the example needs no
/// CUDA compiler to build; the driver JIT-compiles it for the GPU at hand.
const INCREMENT_PTX: &str = r#"
.version 6.0
.target sm_50
.address_size 64

.visible .entry increment(
    .param .u64 data,
    .param .u64 n
)
{
    .reg .pred  %p<2>;
    .reg .b16   %rs<3>;
    .reg .b32   %r<5>;
    .reg .b64   %rd<6>;

    ld.param.u64    %rd1, [data];
    ld.param.u64    %rd2, [n];
    mov.u32         %r1, %ctaid.x;
    mov.u32         %r2, %ntid.x;
    mov.u32         %r3, %tid.x;
    mad.lo.s32      %r4, %r1, %r2, %r3;
    cvt.u64.u32     %rd3, %r4;
    setp.ge.u64     %p1, %rd3, %rd2;
    @%p1 bra        DONE;
    cvta.to.global.u64  %rd4, %rd1;
    add.s64         %rd5, %rd4, %rd3;
    ld.global.u8    %rs1, [%rd5];
    add.s16         %rs2, %rs1, 1;
    st.global.u8    [%rd5], %rs2;
DONE:
    ret;
}
"#;

const N: usize = 1 << 20;

fn main() {
    let _cuda = match cust::quick_init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("echo_cuda: no CUDA device available ({e:?}); this example needs a GPU");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    if let Err(e) = rt.block_on(run()) {
        eprintln!("echo_cuda: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let module = Module::from_ptx(INCREMENT_PTX, &[])?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let ctx = Context::builder().option("NET_DEVICES", "lo").build()?;
    let (ws, wc) = (Worker::new(&ctx, ProgressMode::Event)?, Worker::new(&ctx, ProgressMode::Event)?);
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse()?)?;
    let (server, client) = tokio::join!(listener.accept(), Endpoint::connect(&wc, listener.local_addr()));
    let (server, client) = (server?, client?);

    let zeros = DeviceBuffer::from_slice(&vec![0u8; N])?;
    let mut at_server = DeviceBuffer::from_slice(&vec![0xAAu8; N])?;
    let mut back = DeviceBuffer::from_slice(&vec![0u8; N])?;

    let t0 = std::time::Instant::now();
    let (sent, received) = tokio::join!(client.send(&zeros), server.recv(&mut at_server));
    sent?;
    assert_eq!(received?, N);
    let increment = module.get_function("increment")?;
    let blocks = N.div_ceil(256) as u32;
    // SAFETY: the kernel touches bytes [0, N) of `at_server`, which holds N bytes.
    unsafe {
        cust::launch!(increment<<<GridSize::x(blocks), BlockSize::x(256), 0, stream>>>(
            at_server.as_device_ptr(),
            N as u64
        ))?;
    }
    stream.synchronize()?;
    let (sent, received) = tokio::join!(server.send(&at_server), client.recv(&mut back));
    sent?;
    assert_eq!(received?, N);
    let elapsed = t0.elapsed();

    let mut host = vec![0u8; N];
    back.copy_to(&mut host[..])?;
    assert!(host.iter().all(|&b| b == 1), "every byte came back incremented");
    println!("echo_cuda: {N} bytes of device memory there and back, incremented on the GPU, in {elapsed:?}");
    client.close().await?;
    Ok(())
}
