//! Byte ranges of a buffer as buffers of their own: what a message split into chunks (one per
//! rail, stage or batch) is sent from and received into, on host or device memory alike.
//!
//! [`SendChunks::chunk`] lends one range for reading; [`RecvChunks::cut_mut`] cuts the
//! start of a buffer into consecutive ranges for writing, all borrowed at once, as
//! `split_at_mut` does. Each range keeps the whole buffer borrowed, so no chunk outlives its
//! memory or aliases a writer. Host slices, arrays and `Vec`s of bytes lend sub-slices; with feature `cuda`,
//! `cust` device buffers lend [`DeviceBytes`] / [`DeviceBytesMut`] (`crate::cuda`).
use crate::buffer::{MemoryType, RecvBuffer, SendBuffer};

/// A buffer whose byte ranges can be sent as buffers of their own.
pub trait SendChunks: SendBuffer {
    /// One range of the buffer, borrowed from it.
    type Chunk<'a>: SendBuffer
    where
        Self: 'a;

    /// Bytes `at..at + len`. Panics if they are not all inside the buffer (the callers cut
    /// chunks from lengths they checked against it).
    fn chunk(&self, at: usize, len: usize) -> Self::Chunk<'_>;
}

/// A buffer whose start can be cut into consecutive writable ranges.
pub trait RecvChunks: RecvBuffer {
    /// One range of the buffer, borrowed mutably from it.
    type ChunkMut<'a>: RecvBuffer
    where
        Self: 'a;

    /// The first `lens.iter().sum()` bytes, as consecutive chunks of those lengths, in order.
    /// Panics if they do not fit the buffer.
    fn cut_mut(&mut self, lens: &[usize]) -> Vec<Self::ChunkMut<'_>>;
}

/// The end of `at..at + len`, checked to lie inside `size` bytes.
pub(crate) fn range_end(at: usize, len: usize, size: usize) -> usize {
    match at.checked_add(len) {
        Some(end) if end <= size => end,
        _ => panic!("chunk {at}..{at}+{len} is outside the {size}-byte buffer"),
    }
}

impl SendChunks for [u8] {
    type Chunk<'a> = &'a [u8];

    fn chunk(&self, at: usize, len: usize) -> &[u8] {
        &self[at..range_end(at, len, self.len())]
    }
}

impl RecvChunks for [u8] {
    type ChunkMut<'a> = &'a mut [u8];

    fn cut_mut(&mut self, lens: &[usize]) -> Vec<&mut [u8]> {
        let mut rest = self;
        let mut out = Vec::with_capacity(lens.len());
        for &len in lens {
            range_end(0, len, rest.len());
            let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(len);
            out.push(chunk);
            rest = tail;
        }
        out
    }
}

impl SendChunks for Vec<u8> {
    type Chunk<'a> = &'a [u8];

    fn chunk(&self, at: usize, len: usize) -> &[u8] {
        self.as_slice().chunk(at, len)
    }
}

impl RecvChunks for Vec<u8> {
    type ChunkMut<'a> = &'a mut [u8];

    fn cut_mut(&mut self, lens: &[usize]) -> Vec<&mut [u8]> {
        self.as_mut_slice().cut_mut(lens)
    }
}

impl<const N: usize> SendChunks for [u8; N] {
    type Chunk<'a> = &'a [u8];

    fn chunk(&self, at: usize, len: usize) -> &[u8] {
        self.as_slice().chunk(at, len)
    }
}

impl<const N: usize> RecvChunks for [u8; N] {
    type ChunkMut<'a> = &'a mut [u8];

    fn cut_mut(&mut self, lens: &[usize]) -> Vec<&mut [u8]> {
        self.as_mut_slice().cut_mut(lens)
    }
}

/// `SendBuffer` for references, delegating to what they borrow.
macro_rules! send_buffer_by_reference {
    ($($r:ty),*) => { $(
        // SAFETY: delegates to `B`, whose memory the borrow keeps alive (and, shared,
        // unchanged; exclusive, unaliased) for as long as the reference is used.
        unsafe impl<B: SendBuffer + ?Sized> SendBuffer for $r {
            fn as_ptr(&self) -> *const u8 {
                (**self).as_ptr()
            }
            fn byte_len(&self) -> usize {
                (**self).byte_len()
            }
            fn memory_type(&self) -> MemoryType {
                (**self).memory_type()
            }
        }
    )* };
}
send_buffer_by_reference!(&B, &mut B);

// SAFETY: as above; writable because `B` is, through the exclusive borrow.
unsafe impl<B: RecvBuffer + ?Sized> RecvBuffer for &mut B {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        (**self).as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_chunks_are_the_ranges_they_name() {
        let v: Vec<u8> = (0..10).collect();
        let c = v.chunk(3, 4);
        assert_eq!(c, &[3, 4, 5, 6]);
        assert_eq!(c.byte_len(), 4);
        assert_eq!(c.as_ptr(), v[3..].as_ptr());
        assert_eq!(v.chunk(10, 0).byte_len(), 0);
    }

    #[test]
    fn host_chunks_mut_cut_the_start_in_order() {
        let mut v = vec![0u8; 10];
        let mut parts = v.cut_mut(&[2, 0, 5]);
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [2, 0, 5]);
        parts[2][0] = 9;
        assert_eq!(v, [0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    #[should_panic(expected = "outside the 10-byte buffer")]
    fn a_chunk_past_the_end_panics() {
        let v = vec![0u8; 10];
        let _ = v.chunk(8, 3);
    }

    #[test]
    #[should_panic(expected = "outside the 3-byte buffer")]
    fn chunks_mut_longer_than_the_buffer_panic() {
        let mut v = vec![0u8; 10];
        let _ = v.cut_mut(&[7, 4]);
    }
}
