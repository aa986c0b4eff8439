//! One side's band executor: the rows it holds of every value, and computing op bands from them.

use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::ops::{BandIn, Op};
use crate::plan::Side;
use crate::rows::{Footprint, Rows};
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
    live_bytes: usize,
    peak_bytes: usize,
    batch: usize,
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
        SideExec { graph, side, held, live_bytes: 0, peak_bytes: 0, batch: 1 }
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

    /// Which side this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The largest number of activation bytes held at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
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
        let b = BandIn { tensor: &h.tensor, start: h.rows.start, info };
        b.rows(rows).map_err(|source| Error::Torch { node: self.graph.nodes[id].name.clone(), op: "extract", source })
    }

    /// Rows `need` of value `value` (read by node `node`) as one block: a view of the block
    /// that covers them, or the needed parts of adjacent blocks joined. Blocks are kept as they
    /// arrive rather than merged, so that storing the k-th chunk of an op copies nothing and
    /// reading a band copies only that band (merging on insert copied the whole value held so
    /// far for every chunk: quadratic in the chunk count).
    fn gather(&self, node: NodeId, value: NodeId, need: &Rows) -> Result<Held> {
        if let Some(h) = self.block_covering(value, need) {
            return Ok(Held { rows: h.rows.clone(), tensor: h.tensor.shallow_clone() });
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
            return Ok(Held { rows: need.clone(), tensor });
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
        let tensor = Tensor::f_cat(&parts, axis as i64).map_err(torch)?;
        Ok(Held { rows: need.clone(), tensor })
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
        let needs = self.needs(id, rows);
        let mut blocks = Vec::with_capacity(needs.len());
        for (inp, need) in &needs {
            blocks.push(self.gather(id, *inp, need)?);
        }
        let torch = |source| Error::Torch { node: node.name.clone(), op: node.op.kind_name(), source };
        let band = |tensors: &[Tensor]| -> Result<Tensor> {
            let bands: Vec<BandIn<'_>> = needs
                .iter()
                .zip(&blocks)
                .zip(tensors)
                .map(|(((inp, _), h), tensor)| BandIn { tensor, start: h.rows.start, info: &self.graph.nodes[*inp].info })
                .collect();
            node.op.compute(&bands, &node.info, rows).map_err(torch)
        };
        let whole: Vec<Tensor> = blocks.iter().map(|h| h.tensor.shallow_clone()).collect();
        if self.batch == 1 || batch_safe(self.graph, id) {
            return band(&whole);
        }
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
            outs.push(band(&sample)?);
        }
        Tensor::f_cat(&outs, 0).map_err(torch)
    }

    /// Computes `rows` of node `id` in `chunks` pieces and stores the result.
    ///
    /// # Errors
    /// As [`SideExec::compute`].
    pub fn compute_and_store(&mut self, id: NodeId, rows: &Rows, chunks: usize) -> Result<()> {
        let node = &self.graph.nodes[id];
        let pieces = crate::rows::chunks(rows, chunks);
        let mut outs = Vec::with_capacity(pieces.len());
        for p in &pieces {
            outs.push(self.compute(id, p)?);
        }
        let t = match (outs.len(), node.info.row_axis) {
            (1, _) | (_, None) => outs.swap_remove(0),
            (_, Some(a)) => Tensor::f_cat(&outs, a as i64).map_err(|source| Error::Torch {
                node: node.name.clone(),
                op: node.op.kind_name(),
                source,
            })?,
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::ops::Pool;

    /// input f32 [1,2,12,5] -> 3x3 max pool (stride 1, pad 1): output row r reads rows r-1..r+1.
    fn pool_graph() -> Graph {
        let mut b = GraphBuilder::new("pool");
        let x = b.input("x", vec![1, 2, 12, 5], DType::F32);
        let y = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[x]).expect("pool");
        b.output(y);
        b.build().expect("graph")
    }

    fn input() -> Tensor {
        Tensor::randn([1, 2, 12, 5], (tch::Kind::Float, tch::Device::Cpu))
    }

    #[test]
    fn bands_stored_in_pieces_read_back_across_their_boundaries() {
        let g = pool_graph();
        let x = input();
        let mut side = SideExec::new(&g, Side::Server);
        // Rows 0..4, 4..7 and an overlapping 6..12 (rows 6 already held must keep their values).
        side.insert(0, 0..4, x.narrow(2, 0, 4)).expect("0..4");
        side.insert(0, 4..7, x.narrow(2, 4, 3)).expect("4..7");
        let overlap = x.narrow(2, 6, 6).copy();
        let _ = overlap.narrow(2, 0, 1).fill_(1e6);
        side.insert(0, 6..12, overlap).expect("6..12");
        assert!(side.missing(0, &(0..12)).is_empty());
        let whole = side.extract(0, &(0..12)).expect("whole");
        assert!(whole.equal(&x), "rows read back across three blocks must equal the input");
        let band = side.extract(0, &(3..9)).expect("band");
        assert!(band.equal(&x.narrow(2, 3, 6)));
        // A pool band whose halo spans all three blocks equals the same rows of the whole pool.
        let out = side.compute(1, &(3..8)).expect("pool band");
        let reference = side.compute(1, &(0..12)).expect("pool whole");
        assert!(out.equal(&reference.narrow(2, 3, 5)));
    }

    #[test]
    fn a_batch_gives_every_sample_its_own_unsplit_output() {
        let detect = crate::model::LoadOptions {
            postprocess: Some(crate::postprocess::Postprocess::parse("detect;score=0.05").expect("spec")),
            ..Default::default()
        };
        for (source, opts) in [("zoo:resnet18@64x96", Default::default()), ("zoo:yolo_det@96x128", detect)] {
            let g = crate::model::load(source, &opts).expect("model");
            assert!(unbatchable(&g).is_none(), "{source}");
            let samples: Vec<Vec<Tensor>> = (0..3).map(|s| crate::exec::synthetic_inputs(&g, 11 + s).expect("inputs")).collect();
            let outs = crate::exec::run_batched(&g, &samples, 2).expect("batched run");
            for (s, inputs) in samples.iter().enumerate() {
                let whole = crate::exec::run_whole(&g, inputs).expect("whole").outputs;
                for (o, w) in outs.iter().zip(&whole) {
                    let mine = o.narrow(0, s as i64, 1);
                    assert_eq!(mine.size(), w.size(), "{source} sample {s}");
                    let err = crate::exec::max_rel_err(&mine, w).expect("compare");
                    assert!(err <= 1e-5, "{source} sample {s}: relative error {err}");
                }
            }
            // Different inputs give different outputs: the batch did not serve one sample thrice.
            assert!(!outs[0].narrow(0, 0, 1).equal(&outs[0].narrow(0, 1, 1)), "{source}");
        }
    }

    #[test]
    fn a_batch_refuses_tensors_without_every_sample_and_graphs_without_a_batch_axis() {
        let g = pool_graph();
        let mut side = SideExec::batched(&g, Side::Server, 2).expect("batch of 2");
        assert!(matches!(side.insert(0, 0..12, input()), Err(Error::Input(_))), "one sample where two are due");
        side.insert(0, 0..12, Tensor::cat(&[input(), input()], 0)).expect("two samples");
        assert!(SideExec::batched(&g, Side::Server, 0).is_err());
        let mut b = GraphBuilder::new("no batch axis");
        let x = b.input("x", vec![2, 3, 8, 8], DType::F32);
        let y = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[x]).expect("pool");
        b.output(y);
        let g = b.build().expect("graph");
        let err = SideExec::batched(&g, Side::Server, 2).expect_err("axis 0 is 2");
        assert!(err.to_string().contains("[2, 3, 8, 8]"), "{err}");
        assert!(SideExec::batched(&g, Side::Server, 1).is_ok(), "one sample needs no batch axis");
    }

    #[test]
    fn reading_rows_across_a_gap_names_the_missing_rows() {
        let g = pool_graph();
        let x = input();
        let mut side = SideExec::new(&g, Side::Robot);
        side.insert(0, 0..4, x.narrow(2, 0, 4)).expect("0..4");
        side.insert(0, 6..12, x.narrow(2, 6, 6)).expect("6..12");
        assert_eq!(side.missing(0, &(0..12)), vec![4..6]);
        assert!(matches!(side.extract(0, &(2..8)), Err(Error::MissingRows { .. })));
        assert!(matches!(side.compute(1, &(0..4)), Err(Error::MissingRows { .. })), "row 3 needs input row 4");
        assert!(side.compute(1, &(0..3)).is_ok());
    }

    #[test]
    fn chunked_compute_stores_pieces_that_read_back_whole() {
        let g = pool_graph();
        let x = input();
        let mut side = SideExec::new(&g, Side::Server);
        side.insert(0, 0..12, x.shallow_clone()).expect("input");
        for r in [0..3, 3..5, 5..9, 9..12] {
            side.compute_and_store(1, &r, 1).expect("chunk");
        }
        let reference = side.compute(1, &(0..12)).expect("whole");
        assert!(side.extract(1, &(0..12)).expect("read").equal(&reference));
        let before = side.live_bytes();
        side.insert(1, 2..10, reference.narrow(2, 2, 8)).expect("held already");
        assert_eq!(side.live_bytes(), before, "rows held already are not stored twice");
    }
}
