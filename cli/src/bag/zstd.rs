//! The `zstd` chunk decompressor the MCAP reader is given: rosbag2's MCAP storage compresses
//! its chunks with zstd by default. The `mcap` crate's own needs zstd 0.14 with `zstdmt`, which
//! would build zstd-sys with other features than tch's zip reader does (and so build it, and
//! everything above it, twice: scripts/feature-drift.sh); this one streams through the zstd
//! 0.11 that is already in the build.

use mcap::sans_io::decompressor::{DecompressResult, Decompressor};
use mcap::{McapError, McapResult};
use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

/// A streaming zstd decoder for MCAP chunks.
pub struct Zstd {
    decoder: Decoder<'static>,
    /// The decoder's hint of the input it wants next (0: any amount).
    hint: usize,
}

/// An MCAP error for a zstd failure.
fn failed(e: std::io::Error) -> McapError {
    McapError::DecompressionError(e.to_string())
}

impl Zstd {
    /// A decoder ready for a chunk.
    ///
    /// # Errors
    /// zstd could not allocate its context.
    pub fn new() -> McapResult<Self> {
        Ok(Zstd { decoder: Decoder::new().map_err(failed)?, hint: 0 })
    }
}

impl Decompressor for Zstd {
    fn next_read_size(&self) -> usize {
        self.hint
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> McapResult<DecompressResult> {
        let mut input = InBuffer::around(src);
        let mut output = OutBuffer::around(dst);
        self.hint = self.decoder.run(&mut input, &mut output).map_err(failed)?;
        Ok(DecompressResult { consumed: input.pos(), wrote: output.pos() })
    }

    fn reset(&mut self) -> McapResult<()> {
        self.hint = 0;
        self.decoder.reinit().map_err(failed)
    }

    fn name(&self) -> &'static str {
        "zstd"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two frames in one chunk (as a compressor that flushes writes them), decoded through a
    /// one-byte output window, then the decoder reset for the next chunk.
    #[test]
    fn decodes_frames_across_calls_and_chunks() {
        let (a, b) = (b"first frame ".repeat(50), b"second".repeat(70));
        let mut src = zstd::bulk::compress(&a, 3).expect("compress");
        src.extend(zstd::bulk::compress(&b, 3).expect("compress"));
        let mut z = Zstd::new().expect("decoder");
        for _ in 0..2 {
            let mut out = Vec::new();
            let (mut pos, mut byte) = (0, [0u8; 1]);
            while out.len() < a.len() + b.len() {
                let r = z.decompress(&src[pos..], &mut byte).expect("decodes");
                pos += r.consumed;
                out.extend_from_slice(&byte[..r.wrote]);
                assert!(r.consumed > 0 || r.wrote > 0, "progress");
            }
            assert_eq!(out, [a.clone(), b.clone()].concat());
            z.reset().expect("reset");
        }
        let garbage = *b"not a zstd frame";
        assert!(z.decompress(&garbage, &mut [0u8; 64]).is_err(), "a corrupt frame is an error");
    }
}
