//! `alltoallv` for CUDA device buffers (feature `cuda`). The parts' sizes go first, through
//! the host `alltoallv` (eight bytes a peer, inside its announcement); then every part is one
//! tagged message straight from device buffer to device buffer (UCX moves it with its CUDA
//! transports: `cuda_ipc` between processes on one node, GPUDirect RDMA over a network), and
//! this rank's own part is copied on the device. Device parts always take the direct path: no
//! bounce buffers, and no part inside its announcement, which would go through host memory.
//! The wire rule is ucx-core's (`wire::alltoallv`), shared with the Python communicator.
use std::future::Future;
use std::pin::Pin;

use cust::memory::{CopyDestination, DeviceBuffer};

use super::tag::{self, invalid};
use super::Communicator;
use crate::core::wire::alltoallv::{device_len_decode, device_len_encode, DEVICE_PART_BATCH};
use crate::core::FULL_MASK;
use crate::posting::join_posted;
use crate::{Error, Result};

const OP: &str = "Communicator::alltoallv_device";

impl Communicator {
    /// [`Communicator::alltoallv_into`] for device memory: `parts[r]` goes to rank `r`, and
    /// `out[r]` becomes a device buffer holding what rank `r` sent this rank (a buffer already
    /// there is reused when its length is unchanged). The CUDA context must be current on the
    /// calling thread, as for every UCX operation on device memory. As with host parts, every
    /// peer's transfer settles before an error is returned. A part this rank cannot allocate a
    /// buffer for is received into one byte and dropped, so the other ranks' calls complete
    /// and the communicator stays in step; the allocation's error is returned (and `out` left
    /// empty).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
    pub async fn alltoallv_device_into(
        &self,
        parts: &[&DeviceBuffer<u8>],
        out: &mut Vec<DeviceBuffer<u8>>,
    ) -> Result<()> {
        let size = self.size();
        if parts.len() != size {
            return Err(invalid(OP, format!("{} parts for {size} ranks", parts.len())));
        }
        let lens: Vec<_> = parts.iter().map(|p| device_len_encode(p.len() as u64)).collect();
        let lens: Vec<&[u8]> = lens.iter().map(|l| &l[..]).collect();
        let mut sizes = Vec::new();
        self.alltoallv_into(&lens, &mut sizes).await?;
        let mut old: Vec<Option<DeviceBuffer<u8>>> = std::mem::take(out).into_iter().map(Some).collect();
        // The peers know the sizes now and will send: a part this rank has no room for is
        // still received, and dropped, so the call completes on every other rank and the
        // communicator stays in step; this rank then returns the first such error.
        let mut failure = None;
        let mut fresh = Vec::with_capacity(size);
        let mut part_lens = Vec::with_capacity(size);
        for (r, announced) in sizes.iter().enumerate() {
            let n = device_len_decode(announced)
                .map_err(|e| protocol(format!("rank {r} sent a bad part size: {e}")))
                .and_then(|n| {
                usize::try_from(n).map_err(|_| protocol(format!("rank {r} announced {n} bytes, beyond memory")))
            })?;
            let reused = old.get_mut(r).and_then(Option::take).filter(|b| b.len() == n);
            let buf = match reused {
                Some(b) => Ok(b),
                // An empty buffer is no allocation (cust makes it without calling CUDA).
                None if n == 0 => DeviceBuffer::from_slice(&[]),
                None => DeviceBuffer::zeroed(n),
            };
            part_lens.push(n);
            fresh.push(
                buf.map_err(|e| {
                    failure.get_or_insert(protocol(format!(
                        "rank {r}'s part of {n} bytes: no device buffer for it ({e:?})"
                    )))
                })
                .ok(),
            );
        }
        let me = self.rank();
        if let (false, Some(own)) = (parts[me].is_empty(), fresh[me].as_mut()) {
            if let Err(e) = own.copy_from(parts[me]) {
                failure.get_or_insert(protocol(format!("copying this rank's own part on the device: {e:?}")));
            }
        }
        let seq = self.next_seq();
        let mut ops: Vec<Pin<Box<dyn Future<Output = Result<()>> + Send + '_>>> = Vec::new();
        for (r, buf) in fresh.iter_mut().enumerate().filter(|(r, _)| *r != me) {
            let ep = self.endpoint(r)?;
            if !parts[r].is_empty() {
                let (part, t) = (parts[r], tag::own(seq, me, DEVICE_PART_BATCH, OP)?);
                ops.push(Box::pin(async move { ep.send_tag(part, t).await }));
            }
            let want = part_lens[r];
            if want == 0 {
                continue;
            }
            let t = tag::own(seq, r, DEVICE_PART_BATCH, OP)?;
            match buf {
                Some(buf) => ops.push(Box::pin(async move {
                    let got = ep.recv_tag(buf, t, FULL_MASK).await?;
                    if got != want {
                        return Err(protocol(format!("rank {r} announced {want} bytes and sent {got}")));
                    }
                    Ok(())
                })),
                // No room: received only to be dropped, so its sender completes.
                None => ops.push(Box::pin(super::path::drop_message(ep, t))),
            }
        }
        let failed = join_posted(ops).await.into_iter().find_map(Result::err);
        if let Some(e) = failure.or(failed) {
            // `out` stays empty: not every rank's buffer exists (the next call allocates anew).
            return Err(e);
        }
        *out = fresh.into_iter().flatten().collect();
        Ok(())
    }
}

fn protocol(detail: String) -> Error {
    Error::Protocol { op: OP, detail }
}
