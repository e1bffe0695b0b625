//! UCXX's multi-buffer header (`ucxx::Header`), which frames a message of several buffers
//! (`send_multi`/`recv_multi`, and so the Dask comm): one header per 100 frames, each sent as a
//! tag message of its own before the frames.
//!
//! ```text
//! byte  0          next: another header follows (bool; any non-zero byte reads as true)
//! bytes 1..9       number of frames in this header: u64 LE (at most 100)
//! bytes 9..409     100 CUDA flags: i32 LE each (non-zero: the frame is device memory)
//! bytes 409..1209  100 frame sizes: u64 LE each
//! ```
//!
//! Unused slots are zero. At least one header is sent, even for no frames.
use super::{exact, WireError};

/// Frames one header describes.
pub const FRAMES: usize = 100;

/// Size of a header in bytes.
pub const LEN: usize = 1 + 8 + 4 * FRAMES + 8 * FRAMES;

const WHAT: &str = "UCXX multi-frame header";

/// One frame of a message: its memory and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Whether the frame is device (CUDA) memory.
    pub cuda: bool,
    /// Its size in bytes.
    pub len: u64,
}

/// The headers for `frames`, in order: one per [`FRAMES`] frames, and one even for none.
pub fn encode_all(frames: &[Frame]) -> Vec<[u8; LEN]> {
    let chunks: Vec<&[Frame]> = if frames.is_empty() { vec![&[]] } else { frames.chunks(FRAMES).collect() };
    let last = chunks.len() - 1;
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut h = [0u8; LEN];
            h[0] = u8::from(i < last);
            h[1..9].copy_from_slice(&(chunk.len() as u64).to_le_bytes());
            for (k, f) in chunk.iter().enumerate() {
                h[9 + 4 * k..13 + 4 * k].copy_from_slice(&i32::from(f.cuda).to_le_bytes());
                h[409 + 8 * k..417 + 8 * k].copy_from_slice(&f.len.to_le_bytes());
            }
            h
        })
        .collect()
}

/// Decodes one header: whether another follows, and its frames. A header announcing more
/// than [`FRAMES`] frames, or not exactly [`LEN`] bytes long, is refused.
pub fn decode(bytes: &[u8]) -> Result<(bool, Vec<Frame>), WireError> {
    let h: [u8; LEN] = exact(WHAT, bytes)?;
    let more = h[0] != 0;
    let n = u64::from_le_bytes(h[1..9].try_into().expect("8 bytes"));
    if n > FRAMES as u64 {
        return Err(WireError::Malformed { what: WHAT, why: "more than 100 frames announced" });
    }
    let frames = (0..n as usize)
        .map(|k| Frame {
            cuda: i32::from_le_bytes(h[9 + 4 * k..13 + 4 * k].try_into().expect("4 bytes")) != 0,
            len: u64::from_le_bytes(h[409 + 8 * k..417 + 8 * k].try_into().expect("8 bytes")),
        })
        .collect();
    Ok((more, frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_ucxx() {
        // python3 -c 'import struct; h = struct.pack("<?Q100i100Q", False, 2, 1, 0, *[0]*98, 5, 300, *[0]*98);
        //   print(len(h), h[:13].hex(), h[409:425].hex())'
        // -> 1209 0002000000000000000100000000 05000000000000002c01000000000000
        let h = &encode_all(&[Frame { cuda: true, len: 5 }, Frame { cuda: false, len: 300 }])[0];
        assert_eq!(LEN, 1209);
        assert_eq!(h[0], 0);
        assert_eq!(&h[1..13], &[2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&h[409..425], &[5, 0, 0, 0, 0, 0, 0, 0, 0x2c, 1, 0, 0, 0, 0, 0, 0]);
        assert!(h[425..].iter().all(|b| *b == 0));
    }

    #[test]
    fn round_trips_over_several_headers() {
        let frames: Vec<Frame> = (0..250).map(|i| Frame { cuda: i % 3 == 0, len: i * 1000 }).collect();
        let headers = encode_all(&frames);
        assert_eq!(headers.len(), 3);
        let mut back = Vec::new();
        for (i, h) in headers.iter().enumerate() {
            let (more, f) = decode(h).unwrap();
            assert_eq!(more, i < 2);
            back.extend(f);
        }
        assert_eq!(back, frames);
        let none = encode_all(&[]);
        assert_eq!(none.len(), 1);
        assert_eq!(decode(&none[0]).unwrap(), (false, vec![]));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut h = encode_all(&[])[0];
        h[1] = 101;
        assert!(decode(&h).unwrap_err().to_string().contains("more than 100 frames"));
        assert!(decode(&h[..LEN - 1]).is_err());
        h[1] = 0;
        h[0] = 7; // any non-zero byte means "more"
        assert!(decode(&h).unwrap().0);
    }
}
