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
#[derive(Debug)]
pub struct SideExec<'g> {
    graph: &'g Graph,
    side: Side,
    held: Vec<Vec<Held>>,
    live_bytes: usize,
    peak_bytes: usize,
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
        SideExec { graph, side, held, live_bytes: 0, peak_bytes: 0 }
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

    /// Rows `rows` of value `id` as a tensor (to send, or to read an output).
    ///
    /// # Errors
    /// [`Error::MissingRows`] when no held block covers them.
    pub fn extract(&self, id: NodeId, rows: &Rows) -> Result<Tensor> {
        let info = &self.graph.nodes[id].info;
        let h = self.block_covering(id, rows).ok_or_else(|| self.missing_err(id, id, rows))?;
        let b = BandIn { tensor: &h.tensor, start: h.rows.start, info };
        b.rows(rows).map_err(|source| Error::Torch { node: self.graph.nodes[id].name.clone(), op: "extract", source })
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

    /// Stores rows `rows` of value `id`, merging with held blocks they touch or overlap
    /// (rows already held are kept as they are).
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
        let expect: Vec<i64> =
            info.shape.iter().enumerate().map(|(i, &d)| if Some(i) == axis { rows.len() as i64 } else { d as i64 }).collect();
        if tensor.size() != expect {
            return Err(Error::Input(format!("tensor for rows {rows:?} of '{name}' has shape {:?}, expected {expect:?}", tensor.size())));
        }
        let torch = |source| Error::Torch { node: name.clone(), op: "insert", source };
        let mut block = Held { rows, tensor };
        // Merge with every block that overlaps or touches.
        while let Some(pos) = self.held[id].iter().position(|h| h.rows.start <= block.rows.end && block.rows.start <= h.rows.end) {
            let h = self.held[id].swap_remove(pos);
            self.live_bytes -= super::tensor_bytes(&h.tensor);
            block = merge(h, block, axis).map_err(torch)?;
        }
        self.live_bytes += super::tensor_bytes(&block.tensor);
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        self.held[id].push(block);
        Ok(())
    }

    /// Computes output rows `rows` of node `id` from held inputs.
    ///
    /// # Errors
    /// [`Error::MissingRows`] when an input is not held; libtorch errors.
    pub fn compute(&self, id: NodeId, rows: &Rows) -> Result<Tensor> {
        let node = &self.graph.nodes[id];
        let mut bands = Vec::with_capacity(node.inputs.len());
        for (inp, need) in self.needs(id, rows) {
            let h = self.block_covering(inp, &need).ok_or_else(|| self.missing_err(id, inp, &need))?;
            bands.push(BandIn { tensor: &h.tensor, start: h.rows.start, info: &self.graph.nodes[inp].info });
        }
        node.op.compute(&bands, &node.info, rows).map_err(|source| Error::Torch {
            node: node.name.clone(),
            op: node.op.kind_name(),
            source,
        })
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

fn merge(a: Held, b: Held, axis: Option<usize>) -> Result<Held, tch::TchError> {
    let Some(axis) = axis else { return Ok(a) };
    let (first, second) = if a.rows.start <= b.rows.start { (a, b) } else { (b, a) };
    if second.rows.end <= first.rows.end {
        return Ok(first);
    }
    let skip = first.rows.end.saturating_sub(second.rows.start);
    let tail = second.tensor.f_narrow(axis as i64, skip as i64, (second.rows.len() - skip) as i64)?;
    let tensor = Tensor::f_cat(&[&first.tensor, &tail], axis as i64)?;
    Ok(Held { rows: first.rows.start..second.rows.end, tensor })
}
