//! UCX-Py's CuPy echo, in Rust, across two processes: the client sends a device buffer of
//! zeros, the server receives it into device memory, adds one to every byte on the GPU and
//! sends it back; the client checks that every byte is 1 and prints which transports UCX chose
//! for the endpoint (on one GPU, device memory should move over `cuda_ipc`). The memory type is
//! passed to UCX. Without a CUDA device it says so and exits with status 2; if either side
//! fails, the other is stopped and it exits with status 1.
//!
//! Run: `cargo run --release -p ucx-async --features cuda --example echo_cuda`
//! (`--server`: only the server, prints `PORT n`; `--client PORT`: only the client).
#[path = "common/accept_or_exit.rs"]
mod accept_or_exit;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use accept_or_exit::accept_or_exit;
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

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "\
UCX-Py's CuPy echo in Rust across two processes: a device buffer goes out, the server adds
one on the GPU, the client checks every byte. Needs a CUDA GPU (exits 2 without one).

usage: echo_cuda [--server | --client PORT]
  --server    only the server: prints `PORT n`
  --client P  only the client, against a server on 127.0.0.1:P
With neither, it starts its own server process.";

fn main() {
    usage::exit_if_help(&std::env::args().collect::<Vec<_>>(), USAGE);
    let _cuda = match cust::quick_init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("echo_cuda: no CUDA device available ({e:?}); this example needs a GPU");
            std::process::exit(2);
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let client_port = args.iter().position(|a| a == "--client").and_then(|i| args.get(i + 1));
    let result = if args.iter().any(|a| a == "--server") {
        rt.block_on(server())
    } else if let Some(port) = client_port {
        match port.parse() {
            Ok(port) => rt.block_on(client(port)),
            Err(_) => Err(format!("--client needs a port, got {port:?}").into()),
        }
    } else {
        server_process::run_with_server("echo_cuda", &["--server".to_string()], |port| rt.block_on(client(port)))
    };
    if let Err(e) = result {
        eprintln!("echo_cuda: {e}");
        std::process::exit(1);
    }
}

fn context() -> Result<Context, BoxError> {
    // Loopback for the connection; shared memory and CUDA IPC with peer-failure handling
    // (trusted peers only: one killed mid-send jams the shared queue; docs/reliability.md).
    Ok(Context::builder().option("NET_DEVICES", "lo").option("MM_ERROR_HANDLING", "y").build()?)
}

async fn server() -> Result<(), BoxError> {
    let module = Module::from_ptx(INCREMENT_PTX, &[])?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    let worker = Worker::new(&context()?, ProgressMode::Event)?;
    let listener = Listener::bind(&worker, "127.0.0.1:0".parse()?)?;
    println!("PORT {}", listener.local_addr().port());
    let ep = accept_or_exit(&listener).await?;
    let mut buf = DeviceBuffer::from_slice(&vec![0xAAu8; N])?;
    let n = ep.recv(&mut buf).await?;
    if n != N {
        return Err(format!("received {n} bytes, expected {N}").into());
    }
    let increment = module.get_function("increment")?;
    let blocks = N.div_ceil(256) as u32;
    // SAFETY: the kernel touches bytes [0, N) of `buf`, which holds N bytes.
    unsafe {
        cust::launch!(increment<<<GridSize::x(blocks), BlockSize::x(256), 0, stream>>>(
            buf.as_device_ptr(),
            N as u64
        ))?;
    }
    stream.synchronize()?;
    ep.send(&buf).await?;
    // Wait for the client's close (its control message), so the reply is not cut off.
    let _ = ep.recv(&mut [0u8; 1][..]).await;
    Ok(())
}

async fn client(port: u16) -> Result<(), BoxError> {
    let worker = Worker::new(&context()?, ProgressMode::Event)?;
    let ep = Endpoint::connect(&worker, ([127, 0, 0, 1], port).into()).await?;
    let zeros = DeviceBuffer::from_slice(&vec![0u8; N])?;
    let mut back = DeviceBuffer::from_slice(&vec![0u8; N])?;
    let t0 = std::time::Instant::now();
    ep.send(&zeros).await?;
    let n = ep.recv(&mut back).await?;
    let elapsed = t0.elapsed();
    if n != N {
        return Err(format!("received {n} bytes, expected {N}").into());
    }
    let mut host = vec![0u8; N];
    back.copy_to(&mut host[..])?;
    if !host.iter().all(|&b| b == 1) {
        return Err("the GPU increment did not come back".into());
    }
    println!("echo_cuda: {N} bytes of device memory there and back between two processes, incremented on the GPU, in {elapsed:?}");
    // Which transports UCX chose (ucp_ep_print_info's lane lines).
    for line in ep.core().info().lines().filter(|l| l.contains("lane[")) {
        println!("echo_cuda: {}", line.trim());
    }
    ep.close().await?;
    Ok(())
}
