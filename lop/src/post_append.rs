//! Appending a back-end stage ([`Postprocess`]) to a graph, as its last op. Apart from the
//! stages themselves (`crate::postprocess`), because it needs the graph and its ops, which hold
//! the stages: kept here, nothing imports in a circle.

use crate::error::{Error, Result};
use crate::graph::{Graph, GraphBuilder, NodeId};
use crate::ops::Op;
use crate::postprocess::{ClassMap, Detect, InstanceSpec, Instances, Occupancy, PostOp, Postprocess};

impl Postprocess {
    /// `graph` with this stage after its output; the stage's result becomes the one output
    /// (`segment-instance`: after its two outputs, the detections and the instance map become
    /// the two outputs).
    ///
    /// # Errors
    /// [`Error::Input`] when the graph does not have exactly one output (two for
    /// `segment-instance`), or its output does not fit the task (rank, channel count, keypoint
    /// layout), naming what was expected.
    pub fn apply(&self, graph: Graph) -> Result<Graph> {
        if *self == Postprocess::Raw {
            return Ok(graph);
        }
        if let Postprocess::SegmentInstance(spec) = self {
            return apply_instances(spec, graph);
        }
        let [head] = graph.outputs[..] else {
            return Err(Error::Input(format!(
                "task {} reads one output; '{}' has {} ({})",
                self.task_name(),
                graph.name,
                graph.outputs.len(),
                graph.outputs.iter().map(|&o| graph.nodes[o].name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        };
        let info = graph.nodes[head].info.clone();
        let input_hw = input_hw(&graph);
        let context = |e: String| Error::Input(format!("task {} on '{}' (output {:?}): {e}", self.task_name(), graph.name, info.shape));
        let op = match self {
            Postprocess::Raw | Postprocess::SegmentInstance(_) => unreachable!("returned above"),
            Postprocess::Detect(d) | Postprocess::Pose(d) => PostOp::Detect(Detect::new(d, &info, input_hw).map_err(context)?),
            Postprocess::Segment => PostOp::ClassMap(ClassMap::new(&info).map_err(context)?),
            Postprocess::Occupancy(o) => PostOp::Occupancy(Occupancy::new(o, &info).map_err(context)?),
        };
        let mut b = rebuild(graph)?;
        let out: NodeId = b.add(format!("postprocess/{}", self.task_name()), Op::Post(op), &[head])?;
        b.output(out);
        b.build()
    }
}

/// A builder holding `graph`'s nodes, to which a stage is appended.
fn rebuild(graph: Graph) -> Result<GraphBuilder> {
    let mut b = GraphBuilder::new(graph.name.clone());
    for node in graph.nodes {
        if matches!(node.op, Op::Input) {
            b.input(node.name, node.info.shape, node.info.dtype);
        } else {
            b.add(node.name, node.op, &node.inputs)?;
        }
    }
    Ok(b)
}

/// The image input's height and width (`[1, C, H, W]`), if the first input is one.
fn input_hw(graph: &Graph) -> Option<(usize, usize)> {
    graph.inputs().first().and_then(|&i| {
        let s = &graph.nodes[i].info.shape;
        (s.len() == 4).then(|| (s[2], s[3]))
    })
}

/// `segment-instance` after a YOLOv8-seg graph: the detection op on the head, the head and the
/// prototypes flattened and concatenated, the instance op on that; outputs the detections and
/// the map.
fn apply_instances(spec: &InstanceSpec, graph: Graph) -> Result<Graph> {
    const NEEDS: &str = "a head [1, 4 + classes + nm, anchors] and prototypes [1, nm, H / 4, W / 4] (nm mask coefficients)";
    let shapes =
        || graph.outputs.iter().map(|&o| format!("{} {:?}", graph.nodes[o].name, graph.nodes[o].info.shape)).collect::<Vec<_>>().join(", ");
    let (head, protos) = match graph.outputs[..] {
        [a, b] if graph.nodes[a].info.shape.len() == 3 && graph.nodes[b].info.shape.len() == 4 => (a, b),
        [a, b] if graph.nodes[a].info.shape.len() == 4 && graph.nodes[b].info.shape.len() == 3 => (b, a),
        _ => {
            return Err(Error::Input(format!(
                "task segment-instance reads two outputs, {NEEDS}; '{}' has {} ({})",
                graph.name,
                graph.outputs.len(),
                shapes()
            )));
        }
    };
    let (head_info, protos_info) = (graph.nodes[head].info.clone(), graph.nodes[protos].info.clone());
    let context = |e: String| Error::Input(format!("task segment-instance on '{}' (outputs {}): {e}", graph.name, shapes()));
    let nm = match protos_info.shape[..] {
        [1, nm, _, _] => nm,
        _ => return Err(context(format!("the prototypes have shape [1, nm, H / 4, W / 4], not {:?}", protos_info.shape))),
    };
    let Some(hw) = input_hw(&graph) else {
        return Err(context("the instance map has the input's size; the model has no [1, C, H, W] input".into()));
    };
    let boxes = Detect::with_coefficients(&spec.detect, &head_info, nm).map_err(context)?;
    let masks =
        Instances::new(Detect::with_coefficients(&spec.detect, &head_info, nm).map_err(context)?, &head_info, &protos_info, hw, spec.mask)
            .map_err(context)?;
    let mut b = rebuild(graph)?;
    let name = "postprocess/segment-instance";
    let rows = b.add(name.to_string(), Op::Post(PostOp::Detect(boxes)), &[head])?;
    let flat_head = b.add(format!("{name}/head"), Op::Reshape { shape: vec![1, head_info.numel()] }, &[head])?;
    let flat_protos = b.add(format!("{name}/prototypes"), Op::Reshape { shape: vec![1, protos_info.numel()] }, &[protos])?;
    let packed = b.add(format!("{name}/packed"), Op::Concat { axis: 1 }, &[flat_head, flat_protos])?;
    let map = b.add(format!("{name}/instances"), Op::Post(PostOp::Instances(masks)), &[packed])?;
    b.output(rows);
    b.output(map);
    b.build()
}
