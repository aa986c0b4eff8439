//! One side's band executor: the rows it holds of every value, and computing op bands from them.

use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::ops::{BandIn, Op};
use crate::plan::Side;
use crate::rows::{Footprint, Rows};
use crate::value::DTypeKind;
use tch::Tensor;

/// A contiguous block of rows of one value.
#[derive(Debug)]
pub struct Held {
    /// The rows.
    pub rows: Rows,
    /// The tensor, with `rows.len()` rows along the value's row axis.
    pub tensor: Tensor,
}

/// The state of one side: for every value, the disjoint row blocks it holds (computed itself or
/// received). Constants are held whole from the start.
///
/// A side may run several inferences of the same schedule at once (a *batch*, see
/// [`SideExec::batched`]): every activation then holds the samples stacked along axis 0, so one
/// kernel call computes a band for all of them.
#[derive(Debug)]
pub struct SideExec<'g> {
    graph: &'g Graph,
    side: Side,
    held: Vec<Vec<Held>>,
    /// Per value, the rows this side computes of it, where known ([`SideExec::expect_rows`]).
    spans: Vec<Option<Rows>>,
    /// Per value, the buffer its chunks are written into, with the rows it holds.
    buffers: Vec<Option<(Rows, Tensor)>>,
    live_bytes: usize,
    peak_bytes: usize,
    batch: usize,
    joins: std::cell::Cell<Joins>,
    use_buffers: bool,
}

/// The rows of each input an op reads for some output rows ([`SideExec::needs`]).
type Needs = Vec<(NodeId, Rows)>;

/// Rows of a value gathered for a band: a held block that covers them (borrowed, so that a
/// band read from one block costs no libtorch call), or a block made for them.
enum Block<'a> {
    Held(&'a Held),
    Made(Held),
}

impl Block<'_> {
    fn held(&self) -> &Held {
        match self {
            Block::Held(h) => h,
            Block::Made(h) => h,
        }
    }
}

/// Bands read across blocks that had to be copied together (blocks not adjacent in memory),
/// their bytes and the time the copies took: the executor's own copying, beside the kernels'.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Joins {
    /// Bands copied together.
    pub copies: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Seconds spent copying them.
    pub seconds: f64,
}

/// Whether chunks are written into one buffer per value ([`SideExec::expect_rows`]) by default:
/// yes unless `LOP_BAND_BUFFERS=off`, which keeps every chunk its own block (both give the same
/// values; `lop bench-exec` times the two side by side).
fn band_buffers_default() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LOP_BAND_BUFFERS").map_or(true, |v| v != "off"))
}

/// Why a graph cannot run batched: the first activation whose axis 0 is not a batch axis of
/// extent 1 (its name and shape). `None` when every activation can carry a batch on axis 0.
pub fn unbatchable(graph: &Graph) -> Option<String> {
    graph.nodes.iter().find_map(|n| {
        let activation = !matches!(n.op, Op::Constant(_));
        let ok = n.info.shape.first() == Some(&1) && n.info.row_axis != Some(0);
        (activation && !ok).then(|| format!("value '{}' has shape {:?} (axis 0 must be a batch of 1)", n.name, n.info.shape))
    })
}

/// Whether `op` computes a batch stacked on axis 0 as one call with each sample's result equal
/// to computing it alone: per-sample ops whose attributes never touch axis 0 and whose
/// constant inputs broadcast over it. Other ops (reshapes, matrix products, post-processing,
/// concatenations with constants) run sample by sample.
fn batch_safe(graph: &Graph, id: NodeId) -> bool {
    let node = &graph.nodes[id];
    let constant_inputs = node.inputs.iter().any(|&i| matches!(graph.nodes[i].op, Op::Constant(_)));
    let rank = node.info.shape.len();
    match &node.op {
        Op::NormalizeU8 { .. }
        | Op::ChannelAffine { .. }
        | Op::Unary(_)
        | Op::Conv(_)
        | Op::ConvTranspose(_)
        | Op::MaxPool(_)
        | Op::AvgPool(_)
        | Op::Resize(_) => true,
        // A constant of full rank broadcasts over axis 0 only with extent 1 there.
        Op::Binary(_) => node.inputs.iter().all(|&i| {
            let v = &graph.nodes[i];
            !matches!(v.op, Op::Constant(_)) || v.info.shape.len() < rank || v.info.shape.first() == Some(&1)
        }),
        Op::Concat { axis } => *axis != 0 && !constant_inputs,
        Op::Pad(p) => p.begin.first() == Some(&0) && p.end.first() == Some(&0),
        Op::Slice(axes) => axes.iter().all(|a| a.axis != 0),
        Op::Softmax { axis } => *axis != 0,
        Op::LayerNorm { axis, .. } => *axis >= 1,
        Op::Linear { .. } => rank >= 2,
        Op::ReduceMean { axes, .. } => !axes.contains(&0),
        Op::Transpose { perm } => perm.first() == Some(&0),
        _ => false,
    }
}

impl<'g> SideExec<'g> {
    /// A side holding nothing but the graph's constants.
    pub fn new(graph: &'g Graph, side: Side) -> Self {
        let mut held: Vec<Vec<Held>> = (0..graph.nodes.len()).map(|_| Vec::new()).collect();
        for (id, n) in graph.nodes.iter().enumerate() {
            if let Op::Constant(t) = &n.op {
                held[id].push(Held { rows: 0..n.info.rows(), tensor: t.shallow_clone() });
            }
        }
        let n = graph.nodes.len();
        SideExec {
            graph,
            side,
            held,
            spans: vec![None; n],
            buffers: (0..n).map(|_| None).collect(),
            live_bytes: 0,
            peak_bytes: 0,
            batch: 1,
            joins: Default::default(),
            use_buffers: band_buffers_default(),
        }
    }

    /// A side running `batch` inferences of `graph` at once, samples stacked on axis 0 of every
    /// activation (tensors stored and read back carry `batch` there).
    ///
    /// # Errors
    /// [`Error::Input`] when `batch` is zero or the graph cannot carry a batch ([`unbatchable`]).
    pub fn batched(graph: &'g Graph, side: Side, batch: usize) -> Result<Self> {
        if batch == 0 {
            return Err(Error::Input("a batch needs at least one sample".into()));
        }
        if batch > 1
            && let Some(why) = unbatchable(graph)
        {
            return Err(Error::Input(format!("model '{}' cannot run batched: {why}", graph.name)));
        }
        let mut exec = SideExec::new(graph, side);
        exec.batch = batch;
        Ok(exec)
    }

    /// How many inferences this side runs at once (1 unless [`SideExec::batched`]).
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Declares that this side computes rows `rows` of value `id`, in chunks in any order: the
    /// chunks of an op that can write into a buffer ([`Op::computes_into`]) then land in one
    /// buffer of those rows, allocated at the first chunk, so that a band read across chunks is
    /// a view, not a copy ([`super::band_buffer`]). Without it, only the chunks of one
    /// [`SideExec::compute_and_store`] call share a buffer.
    pub fn expect_rows(&mut self, id: NodeId, rows: Rows) {
        if let Some(span) = self.spans.get_mut(id) {
            *span = Some(rows);
        }
    }

    /// Whether chunks go into buffers at all (on by default, see [`SideExec::expect_rows`]).
    pub fn set_buffers(&mut self, on: bool) {
        self.use_buffers = on;
    }

    /// Whether chunks go into buffers ([`SideExec::set_buffers`]).
    pub fn buffers(&self) -> bool {
        self.use_buffers
    }

    /// Which side this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The largest number of activation bytes held at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Bands this side copied together from several blocks so far ([`Joins`]).
    pub fn joins(&self) -> Joins {
        self.joins.get()
    }

    /// Activation bytes held now (constants excluded).
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// The graph this side executes.
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    /// The row blocks held of value `id`.
    pub fn held(&self, id: NodeId) -> impl Iterator<Item = &Rows> {
        self.held[id].iter().map(|h| &h.rows)
    }

    /// Rows of every input that node `id` needs to compute output rows `rows`.
    pub fn needs(&self, id: NodeId, rows: &Rows) -> Vec<(NodeId, Rows)> {
        let node = &self.graph.nodes[id];
        node.inputs
            .iter()
            .enumerate()
            .map(|(k, &inp)| {
                let info = &self.graph.nodes[inp].info;
                let need = match (info.row_axis, self.graph.footprint(id, k, rows)) {
                    (Some(_), Footprint::Rows(r)) => r,
                    _ => 0..info.rows(),
                };
                (inp, need)
            })
            .collect()
    }

    /// The parts of `need` (rows of value `id`) that this side does not hold.
    pub fn missing(&self, id: NodeId, need: &Rows) -> Vec<Rows> {
        let mut out = Vec::new();
        let mut cur = need.start;
        let mut blocks: Vec<&Rows> = self.held(id).collect();
        blocks.sort_by_key(|r| r.start);
        for b in blocks {
            if cur >= need.end {
                break;
            }
            if b.end <= cur {
                continue;
            }
            if b.start > cur {
                out.push(cur..b.start.min(need.end));
            }
            cur = cur.max(b.end);
        }
        if cur < need.end {
            out.push(cur..need.end);
        }
        out.retain(|r| !r.is_empty());
        out
    }

    fn block_covering(&self, id: NodeId, rows: &Rows) -> Option<&Held> {
        self.held[id].iter().find(|h| h.rows.start <= rows.start && rows.end <= h.rows.end)
    }

    /// Replaces held rows `rows` of value `id` by `tensor`'s, in place: a robot that codes its
    /// frame for the link computes on the decoded pixels, which the server decodes too.
    ///
    /// # Errors
    /// [`Error::MissingRows`] when the rows are not all held; libtorch errors (a tensor of
    /// another shape).
    pub fn overwrite(&mut self, id: NodeId, rows: &Rows, tensor: &Tensor) -> Result<()> {
        let info = &self.graph.nodes[id].info;
        let name = self.graph.nodes[id].name.clone();
        if !self.missing(id, rows).is_empty() {
            return Err(Error::Input(format!("rows {rows:?} of '{name}' to overwrite are not all held")));
        }
        let Some(axis) = info.row_axis else {
            return Err(Error::Input(format!("'{name}' has no row axis to overwrite rows of")));
        };
        let torch = |source| Error::Torch { node: name.clone(), op: "overwrite", source };
        for h in &mut self.held[id] {
            let (a, b) = (h.rows.start.max(rows.start), h.rows.end.min(rows.end));
            if a >= b {
                continue;
            }
            let mut dst = h.tensor.f_narrow(axis as i64, (a - h.rows.start) as i64, (b - a) as i64).map_err(torch)?;
            let src = tensor.f_narrow(axis as i64, (a - rows.start) as i64, (b - a) as i64).map_err(torch)?;
            dst.f_copy_(&src).map_err(torch)?;
        }
        Ok(())
    }

    /// Rows `rows` of value `id` as a tensor (to send, or to read an output).
    ///
    /// # Errors
    /// [`Error::MissingRows`] when the held blocks do not cover them.
    pub fn extract(&self, id: NodeId, rows: &Rows) -> Result<Tensor> {
        let info = &self.graph.nodes[id].info;
        let h = self.gather(id, id, rows)?;
        let b = BandIn { tensor: &h.held().tensor, start: h.held().rows.start, info };
        b.rows(rows).map_err(|source| Error::Torch { node: self.graph.nodes[id].name.clone(), op: "extract", source })
    }

    /// Rows `need` of value `value` (read by node `node`) as one block: a view of the block
    /// that covers them, or the needed parts of adjacent blocks joined. Blocks are kept as they
    /// arrive rather than merged, so that storing the k-th chunk of an op copies nothing and
    /// reading a band copies only that band (merging on insert copied the whole value held so
    /// far for every chunk: quadratic in the chunk count).
    fn gather(&self, node: NodeId, value: NodeId, need: &Rows) -> Result<Block<'_>> {
        if let Some(h) = self.block_covering(value, need) {
            return Ok(Block::Held(h));
        }
        let info = &self.graph.nodes[value].info;
        let Some(axis) = info.row_axis else { return Err(self.missing_err(node, value, need)) };
        let torch = |source| Error::Torch { node: self.graph.nodes[node].name.clone(), op: "gather", source };
        if need.is_empty() {
            // A band that reads none of its input's rows (a pad's margin): an empty block, on
            // the device the side computes on (that of any value it holds, constants included).
            let device = self.held.iter().flatten().next().map_or(tch::Device::Cpu, |h| h.tensor.device());
            let shape: Vec<i64> = info
                .shape
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if i == axis {
                        0
                    } else if i == 0 {
                        (d * self.batch) as i64
                    } else {
                        d as i64
                    }
                })
                .collect();
            let tensor = Tensor::f_zeros(shape.as_slice(), (info.dtype.kind(), device)).map_err(torch)?;
            return Ok(Block::Made(Held { rows: need.clone(), tensor }));
        }
        let mut blocks: Vec<&Held> = self.held[value].iter().filter(|h| h.rows.start < need.end && need.start < h.rows.end).collect();
        blocks.sort_by_key(|h| h.rows.start);
        let mut parts = Vec::with_capacity(blocks.len());
        let mut cur = need.start;
        for h in blocks {
            if h.rows.start > cur {
                break;
            }
            let end = h.rows.end.min(need.end);
            if end <= cur {
                continue;
            }
            parts.push(h.tensor.f_narrow(axis as i64, (cur - h.rows.start) as i64, (end - cur) as i64).map_err(torch)?);
            cur = end;
        }
        if cur < need.end {
            return Err(self.missing_err(node, value, need));
        }
        let tensor = match super::band_buffer::join_views(&parts, axis) {
            Some(view) => view,
            None => {
                let t0 = std::time::Instant::now();
                let joined = Tensor::f_cat(&parts, axis as i64).map_err(torch)?;
                let j = self.joins.get();
                let bytes = j.bytes + super::tensor_bytes(&joined);
                self.joins.set(Joins { copies: j.copies + 1, bytes, seconds: j.seconds + t0.elapsed().as_secs_f64() });
                joined
            }
        };
        Ok(Block::Made(Held { rows: need.clone(), tensor }))
    }

    fn missing_err(&self, node: NodeId, value: NodeId, need: &Rows) -> Error {
        Error::MissingRows {
            node: self.graph.nodes[node].name.clone(),
            side: self.side.name(),
            value: self.graph.nodes[value].name.clone(),
            need: need.clone(),
            held: self.held[value].first().map(|h| h.rows.clone()),
        }
    }

    /// Stores rows `rows` of value `id`; rows already held are kept as they are (only the new
    /// rows of `tensor` are stored, as views).
    ///
    /// # Errors
    /// [`Error::Input`] when the tensor's row count does not match `rows`; libtorch errors.
    pub fn insert(&mut self, id: NodeId, rows: Rows, tensor: Tensor) -> Result<()> {
        let info = &self.graph.nodes[id].info;
        let name = &self.graph.nodes[id].name;
        if rows.end > info.rows() || rows.is_empty() {
            return Err(Error::Input(format!("rows {rows:?} of '{name}' outside 0..{}", info.rows())));
        }
        let axis = info.row_axis;
        let got = axis.map_or(1, |a| tensor.size().get(a).copied().unwrap_or(-1) as usize);
        if got != rows.len() {
            return Err(Error::Input(format!("tensor for rows {rows:?} of '{name}' has {got} rows")));
        }
        let batch = self.batch;
        let expect: Vec<i64> = info
            .shape
            .iter()
            .enumerate()
            .map(|(i, &d)| match i {
                _ if Some(i) == axis => rows.len() as i64,
                0 => (d * batch) as i64,
                _ => d as i64,
            })
            .collect();
        if tensor.size() != expect {
            return Err(Error::Input(format!("tensor for rows {rows:?} of '{name}' has shape {:?}, expected {expect:?}", tensor.size())));
        }
        let torch = |source| Error::Torch { node: name.clone(), op: "insert", source };
        let gaps = self.missing(id, &rows);
        let mut new = Vec::with_capacity(gaps.len());
        for gap in gaps {
            let t = match axis {
                Some(a) if gap != rows => tensor.f_narrow(a as i64, (gap.start - rows.start) as i64, gap.len() as i64).map_err(torch)?,
                _ => tensor.shallow_clone(),
            };
            new.push(Held { rows: gap, tensor: t });
        }
        for h in new {
            self.live_bytes += super::tensor_bytes(&h.tensor);
            self.held[id].push(h);
        }
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        Ok(())
    }

    /// Computes output rows `rows` of node `id` from held inputs.
    ///
    /// # Errors
    /// [`Error::MissingRows`] when an input is not held; libtorch errors.
    pub fn compute(&self, id: NodeId, rows: &Rows) -> Result<Tensor> {
        let node = &self.graph.nodes[id];
        let (needs, blocks) = self.gather_inputs(id, rows)?;
        let torch = |source| Error::Torch { node: node.name.clone(), op: node.op.kind_name(), source };
        let band = |tensors: &[&Tensor]| -> Result<Tensor> {
            let bands = self.band_ins(&needs, &blocks, tensors);
            node.op.compute(&bands, &node.info, rows).map_err(torch)
        };
        if self.batch == 1 || batch_safe(self.graph, id) {
            let whole: Vec<&Tensor> = blocks.iter().map(|b| &b.held().tensor).collect();
            return band(&whole);
        }
        let whole: Vec<Tensor> = blocks.iter().map(|b| b.held().tensor.shallow_clone()).collect();
        // Sample by sample: each input's sample `s` (constants whole), results stacked again.
        let mut outs = Vec::with_capacity(self.batch);
        for s in 0..self.batch {
            let sample: Vec<Tensor> = needs
                .iter()
                .zip(&whole)
                .map(|((inp, _), t)| match self.graph.nodes[*inp].op {
                    Op::Constant(_) => Ok(t.shallow_clone()),
                    _ => t.f_narrow(0, s as i64, 1).map_err(torch),
                })
                .collect::<Result<_>>()?;
            outs.push(band(&sample.iter().collect::<Vec<_>>())?);
        }
        Tensor::f_cat(&outs, 0).map_err(torch)
    }

    /// The rows of every input node `id` reads for output rows `rows`, each gathered as one
    /// block.
    fn gather_inputs(&self, id: NodeId, rows: &Rows) -> Result<(Needs, Vec<Block<'_>>)> {
        let needs = self.needs(id, rows);
        let blocks = needs.iter().map(|(inp, need)| self.gather(id, *inp, need)).collect::<Result<_>>()?;
        Ok((needs, blocks))
    }

    fn band_ins<'a>(&'a self, needs: &[(NodeId, Rows)], blocks: &[Block<'_>], tensors: &[&'a Tensor]) -> Vec<BandIn<'a>> {
        needs
            .iter()
            .zip(blocks)
            .zip(tensors)
            .map(|(((inp, _), b), tensor)| BandIn { tensor, start: b.held().rows.start, info: &self.graph.nodes[*inp].info })
            .collect()
    }

    /// Computes output rows `rows` of node `id` into its buffer, when the op can write there
    /// and this side expects to compute those rows ([`SideExec::expect_rows`]) and holds none
    /// of them yet: the written band of the buffer, or `None` (nothing written).
    fn compute_into_buffer(&mut self, id: NodeId, rows: &Rows) -> Result<Option<Tensor>> {
        let node = &self.graph.nodes[id];
        let span = match &self.spans[id] {
            _ if !self.use_buffers => return Ok(None),
            Some(span) if span.start <= rows.start && rows.end <= span.end && !rows.is_empty() => span.clone(),
            _ => return Ok(None),
        };
        // Buffers live on the CPU, where the ops that write into them run.
        let on_cpu = node.inputs.first().and_then(|&i| self.held[i].first()).is_some_and(|h| h.tensor.device() == tch::Device::Cpu);
        // Written only where none of the rows is held yet (as `missing` would say, without its
        // allocations: this runs for every band).
        let any_held = self.held[id].iter().any(|h| h.rows.start < rows.end && rows.start < h.rows.end);
        if !on_cpu || !super::band_buffer::bufferable(node, self.batch, self.graph.layout()) || any_held {
            return Ok(None);
        }
        let torch = |source| Error::Torch { node: node.name.clone(), op: node.op.kind_name(), source };
        if self.buffers[id].as_ref().is_none_or(|(held, _)| *held != span) {
            self.buffers[id] = Some((span.clone(), super::band_buffer::allocate(node, &span).map_err(torch)?));
        }
        let Some((_, buffer)) = &self.buffers[id] else { return Ok(None) };
        let dst = buffer.f_narrow(2, (rows.start - span.start) as i64, rows.len() as i64).map_err(torch)?;
        let (needs, blocks) = self.gather_inputs(id, rows)?;
        let tensors: Vec<&Tensor> = blocks.iter().map(|b| &b.held().tensor).collect();
        let bands = self.band_ins(&needs, &blocks, &tensors);
        Ok(node.op.compute_into(&bands, &node.info, rows, &dst).map_err(torch)?.then_some(dst))
    }

    /// Computes `rows` of node `id` in `chunks` pieces and stores the result. The pieces of an
    /// op that can write into a buffer are written into one (rows `rows`, unless
    /// [`SideExec::expect_rows`] named wider ones) and stored as one block.
    ///
    /// # Errors
    /// As [`SideExec::compute`].
    pub fn compute_and_store(&mut self, id: NodeId, rows: &Rows, chunks: usize) -> Result<()> {
        let node = &self.graph.nodes[id];
        let pieces = crate::rows::chunks(rows, chunks);
        if pieces.len() > 1 && self.spans[id].as_ref().is_none_or(|s| !(s.start <= rows.start && rows.end <= s.end)) {
            self.spans[id] = Some(rows.clone());
        }
        let mut outs = Vec::with_capacity(pieces.len());
        for p in &pieces {
            let out = match self.compute_into_buffer(id, p)? {
                Some(written) => written,
                None => self.compute(id, p)?,
            };
            outs.push(out);
        }
        let t = match (outs.len(), node.info.row_axis) {
            (1, _) | (_, None) => outs.swap_remove(0),
            (_, Some(a)) => match super::band_buffer::join_views(&outs, a) {
                Some(view) => view,
                None => Tensor::f_cat(&outs, a as i64).map_err(|source| Error::Torch {
                    node: node.name.clone(),
                    op: node.op.kind_name(),
                    source,
                })?,
            },
        };
        let rows = if node.info.row_axis.is_some() { rows.clone() } else { 0..1 };
        self.insert(id, rows, t)
    }

    /// Forgets every row of value `id` (constants stay).
    pub fn release(&mut self, id: NodeId) {
        if matches!(self.graph.nodes[id].op, Op::Constant(_)) {
            return;
        }
        for h in self.held[id].drain(..) {
            self.live_bytes -= super::tensor_bytes(&h.tensor);
        }
        self.buffers[id] = None;
    }
}

#[cfg(test)]
#[path = "side_tests.rs"]
mod tests;
