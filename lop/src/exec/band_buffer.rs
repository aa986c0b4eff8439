//! Chunks of one value kept as one block of memory: a buffer holding the rows a side computes of
//! a value, which chunks are written into as they are computed ([`crate::ops::Op::compute_into`]),
//! and the joining of adjacent row views of one buffer into a single view.
//!
//! A side that computes an op in chunks (a server computing a frame as its bands arrive) would
//! otherwise hold one tensor per chunk, and every band a later op reads across two chunks (a 3x3
//! convolution's halo) would be copied together first: on yolo_det at 320 px in 8 bands, 333
//! such joins per frame copied 14 MB (2.5 ms of a 25 ms frame on one core). Written into one
//! buffer, the chunks are adjacent in memory and such a band is a view.

use crate::graph::{DType, Layout, Node};
use crate::rows::Rows;
use tch::{Device, Kind, Tensor};

/// Whether chunks of `node`'s value can be written into a buffer: an op that can write its
/// output into a given tensor, over a 4-d float value with rows on axis 2, one sample (a batch
/// stacks samples on axis 0, so a row band of it is not one block of memory).
pub(super) fn bufferable(node: &Node, batch: usize, layout: Layout) -> bool {
    batch == 1
        && node.op.computes_into(layout == Layout::ChannelsLast)
        && node.info.row_axis == Some(2)
        && node.info.shape.len() == 4
        && node.info.dtype == DType::F32
        && node.info.shape[0] == 1
}

/// An uninitialised buffer for rows `span` of `node`'s value, on the CPU, in channels-last
/// memory (`[N, C, H, W]` over NHWC), the layout the direct convolution writes: a row band of
/// it is one dense NHWC block.
///
/// # Errors
/// libtorch's allocation error.
pub(super) fn allocate(node: &Node, span: &Rows) -> Result<Tensor, tch::TchError> {
    let s = &node.info.shape;
    let nhwc = [s[0] as i64, span.len() as i64, s[3] as i64, s[1] as i64];
    Tensor::f_empty(nhwc, (Kind::Float, Device::Cpu))?.f_permute([0, 3, 1, 2])
}

/// `parts` (row bands along `axis`, in order) as one view when they are adjacent pieces of one
/// tensor's memory with the same strides, as chunks written into one buffer are; `None` when
/// they are not (they are then joined by copying).
pub(super) fn join_views(parts: &[Tensor], axis: usize) -> Option<Tensor> {
    let first = parts.first()?;
    let (stride, mut size) = (first.stride(), first.size());
    let elem = first.kind().elt_size_in_bytes();
    let base = |t: &Tensor| (t.data_ptr() as usize).wrapping_sub(t.storage_offset() as usize * elem);
    let mut next = first.data_ptr() as usize + size[axis] as usize * stride[axis] as usize * elem;
    for p in &parts[1..] {
        let p_size = p.size();
        let same_frame = p.kind() == first.kind()
            && p.device() == first.device()
            && p.stride() == stride
            && p_size.len() == size.len()
            && (0..size.len()).all(|d| d == axis || p_size[d] == size[d]);
        // Adjacent in one storage: two allocations may lie side by side by chance.
        if !same_frame || p.data_ptr() as usize != next || base(p) != base(first) {
            return None;
        }
        next += p_size[axis] as usize * stride[axis] as usize * elem;
        size[axis] += p_size[axis];
    }
    first.f_as_strided(size.as_slice(), stride.as_slice(), first.storage_offset()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_bands_of_one_tensor_join_into_a_view_and_others_do_not() {
        let whole = Tensor::randn([1, 12, 5, 8], (Kind::Float, Device::Cpu)).permute([0, 3, 1, 2]);
        let parts = [whole.narrow(2, 2, 3), whole.narrow(2, 5, 1), whole.narrow(2, 6, 4)];
        let joined = join_views(&parts, 2).expect("adjacent bands");
        assert!(joined.equal(&whole.narrow(2, 2, 8)));
        assert_eq!(joined.data_ptr(), parts[0].data_ptr(), "a view, not a copy");
        // Channel slices of adjacent bands (a Slice of a buffered value) join too.
        let sliced: Vec<Tensor> = parts.iter().map(|p| p.narrow(1, 4, 4)).collect();
        assert!(join_views(&sliced, 2).expect("sliced bands").equal(&whole.narrow(2, 2, 8).narrow(1, 4, 4)));
        // A gap, the wrong order, another tensor: no view.
        assert!(join_views(&[whole.narrow(2, 0, 2), whole.narrow(2, 3, 2)], 2).is_none());
        assert!(join_views(&[whole.narrow(2, 4, 2), whole.narrow(2, 2, 2)], 2).is_none());
        let other = whole.copy();
        assert!(join_views(&[whole.narrow(2, 0, 2), other.narrow(2, 2, 2)], 2).is_none());
    }

    #[test]
    fn a_buffer_band_is_one_dense_nhwc_block() {
        let mut b = crate::graph::GraphBuilder::new("b");
        let x = b.input("x", vec![1, 3, 10, 7], DType::F32);
        b.output(x);
        let g = b.build().expect("graph");
        let buf = allocate(&g.nodes[0], &(2..9)).expect("buffer");
        assert_eq!(buf.size(), [1, 3, 7, 7]);
        let band = buf.narrow(2, 3, 2);
        assert_eq!(band.stride(), [147, 1, 21, 3], "rows of an NHWC buffer");
    }
}
