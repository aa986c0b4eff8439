//! `lop bench-exec MODEL`: the band executor running the model as one band, and as a server
//! computes it (every op in `--bands` row bands), against a plain whole-graph run of the same IR;
//! the peak activation memory of a split run; with `--kinds`, where the whole run's time goes,
//! op kind by op kind (`scripts/against_onnxruntime.py` prints it beside onnxruntime's).

use crate::ModelArgs;
use lop::exec::{run_banded_kernels_timed, run_batched, run_batched_stats, run_split, run_whole, run_whole_timed, synthetic_inputs};
use lop::graph::Graph;
use lop::plan::Plan;
use lop::profile::LayoutChoice;
use std::collections::BTreeMap;
use std::time::Instant;

mod report;

/// Arguments of `lop bench-exec`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed runs per method (median reported).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Untimed warm-up runs per method.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Units per op for the split run measured for memory.
    #[arg(long, default_value_t = 8)]
    pub units: usize,
    /// Row bands per op of the banded run (as a server computes a frame in chunks).
    #[arg(long, default_value_t = 8)]
    pub bands: usize,
    /// Memory layout of convolutions: nchw, channels_last, or auto (both timed as `lop profile`
    /// times them, the faster kept).
    #[arg(long, default_value = "nchw")]
    pub layout: LayoutChoice,
    /// Also time every op of the whole run and print the time per op kind (median over the runs).
    #[arg(long)]
    pub kinds: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Lays `graph` out as `choice` says; returns the layout's name.
fn lay_out(graph: &mut Graph, inputs: &[tch::Tensor], choice: LayoutChoice) -> anyhow::Result<&'static str> {
    let layout = match choice.fixed() {
        Some(l) => l,
        None => lop::profile::choose_layout(graph, inputs, lop::profile::DeviceKind::Cpu)?.0,
    };
    graph.set_layout(layout)?;
    Ok(layout.name())
}

/// One op kind's share of a run: its op count and median milliseconds whole and with every op
/// in bands (its kernels alone, [`run_banded_kernels_timed`]).
struct KindTime {
    kind: String,
    ops: usize,
    whole_ms: f64,
    banded_ms: f64,
}

/// Median milliseconds per op kind over `runs` timed runs, whole and with every op in `bands`
/// bands (kernels only), with the count of ops of each kind, largest whole time first.
fn time_kinds(graph: &Graph, inputs: &[tch::Tensor], runs: usize, bands: usize) -> anyhow::Result<Vec<KindTime>> {
    let mut per_run: BTreeMap<&'static str, (usize, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for _ in 0..runs {
        let (_, whole) = run_whole_timed(graph, inputs)?;
        let (_, banded) = run_banded_kernels_timed(graph, inputs, bands)?;
        let mut sums: BTreeMap<&'static str, (usize, f64, f64)> = BTreeMap::new();
        for id in (0..graph.nodes.len()).filter(|&id| graph.is_op(id)) {
            let e = sums.entry(graph.nodes[id].op.kind_name()).or_default();
            *e = (e.0 + 1, e.1 + whole[id] * 1e3, e.2 + banded[id] * 1e3);
        }
        for (kind, (count, w, b)) in sums {
            let e = per_run.entry(kind).or_default();
            e.0 = count;
            e.1.push(w);
            e.2.push(b);
        }
    }
    let mut kinds: Vec<KindTime> = per_run
        .into_iter()
        .map(|(k, (ops, w, b))| KindTime { kind: k.to_string(), ops, whole_ms: median(w), banded_ms: median(b) })
        .collect();
    kinds.sort_by(|a, b| b.whole_ms.total_cmp(&a.whole_ms));
    Ok(kinds)
}

/// Milliseconds one call of `op` costs when it has almost nothing to compute (its input
/// `shape`, one pixel), in `layout`, median of 200 timed calls after 20 untimed: libtorch's fixed
/// cost per kernel call (oneDNN's primitive set-up, dispatch, the output's allocation), which
/// every extra band of every such op pays again.
fn call_cost_ms(op: lop::ops::Op, shape: Vec<usize>, layout: lop::graph::Layout) -> anyhow::Result<f64> {
    use lop::graph::{DType, GraphBuilder};
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let mut b = GraphBuilder::new("call floor");
    let x = b.input("x", shape, DType::F32);
    let id = b.add("op", op, &[x])?;
    b.output(id);
    let mut graph = b.build()?;
    graph.set_layout(layout)?;
    let input = [tch::Tensor::randn(dims.as_slice(), (tch::Kind::Float, tch::Device::Cpu))];
    let mut times = Vec::with_capacity(200);
    for i in 0..220 {
        let (_, seconds) = run_whole_timed(&graph, &input)?;
        if i >= 20 {
            times.push(seconds[id] * 1e3);
        }
    }
    Ok(median(times))
}

/// What the fixed cost per call alone adds when every op runs in `bands` bands: the floor of the
/// banded run over the whole one, counting only the extra calls of the convolutions (16 channels,
/// 1x1, one pixel) and linear layers (16 features, one row) with a row axis.
struct CallFloor {
    conv_ms: f64,
    convs: usize,
    linear_ms: f64,
    linears: usize,
    ratio: f64,
}

fn call_floor(graph: &Graph, layout: lop::graph::Layout, bands: usize, whole_ms: f64) -> anyhow::Result<CallFloor> {
    use lop::ops::{Conv, Op};
    let weight = || tch::Tensor::randn([16, 16], (tch::Kind::Float, tch::Device::Cpu));
    let conv_ms = call_cost_ms(Op::Conv(Conv::same2d(weight().reshape([16, 16, 1, 1]))), vec![1, 16, 1, 1], layout)?;
    let linear_ms = call_cost_ms(Op::Linear { weight: weight(), bias: None, act: None }, vec![1, 1, 1, 16], layout)?;
    let banded = |f: fn(&Op) -> bool| graph.nodes.iter().filter(|n| f(&n.op) && n.info.row_axis.is_some()).count();
    let convs = banded(|op| matches!(op, Op::Conv(_)));
    let linears = banded(|op| matches!(op, Op::Linear { .. }));
    let extra = bands.saturating_sub(1) as f64 * (convs as f64 * conv_ms + linears as f64 * linear_ms);
    Ok(CallFloor { conv_ms, convs, linear_ms, linears, ratio: (whole_ms + extra) / whole_ms })
}

/// The median of `v` (NaN when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The four methods' median milliseconds, timed interleaved so that drift in the machine's load
/// hits all alike: whole, the executor with one band, every op in bands with chunks written
/// into one buffer per value, and the same without buffers.
struct Timings {
    whole_ms: f64,
    one_band_ms: f64,
    chunked_ms: f64,
    unbuffered_ms: f64,
}

fn time_methods(graph: &Graph, chunked: &[Vec<tch::Tensor>], args: &BenchArgs) -> anyhow::Result<Timings> {
    let inputs = &chunked[0];
    let one_band = Plan::robot_only(graph, args.units);
    for _ in 0..args.warmup {
        run_whole(graph, inputs)?;
        run_split(graph, &one_band, inputs)?;
        run_batched(graph, chunked, args.bands)?;
    }
    let mut times: [Vec<f64>; 4] = Default::default();
    let timed = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    for i in 0..args.runs {
        times[0].push(timed(&mut || Ok(run_whole(graph, inputs).map(drop)?))?);
        times[1].push(timed(&mut || Ok(run_split(graph, &one_band, inputs).map(drop)?))?);
        times[2].push(timed(&mut || Ok(run_batched(graph, chunked, args.bands).map(drop)?))?);
        times[3].push(timed(&mut || Ok(run_batched_stats(graph, chunked, args.bands, false).map(drop)?))?);
        if (i + 1) % 5 == 0 {
            eprintln!("bench-exec {}: {}/{} runs", graph.name, i + 1, args.runs);
        }
    }
    let [whole, one, bands, unbuffered] = times;
    Ok(Timings { whole_ms: median(whole), one_band_ms: median(one), chunked_ms: median(bands), unbuffered_ms: median(unbuffered) })
}

/// Measures and prints the overhead ratio (band executor / whole run) and the memory ratio.
///
/// # Errors
/// Load or execution failures.
pub fn run(args: &BenchArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.runs > 0, "--runs {}: must be at least 1", args.runs);
    anyhow::ensure!(args.bands > 0, "--bands {}: must be at least 1", args.bands);
    let mut graph = args.model.load()?;
    let inputs = synthetic_inputs(&graph, 0)?;
    let layout = lay_out(&mut graph, &inputs, args.layout)?;
    let chunked = std::slice::from_ref(&inputs);
    let t = time_methods(&graph, chunked, args)?;
    let kinds = if args.kinds { time_kinds(&graph, &inputs, args.runs, args.bands)? } else { Vec::new() };
    let peak = |plan: Option<Plan>| -> anyhow::Result<usize> {
        Ok(match plan {
            Some(p) => run_split(&graph, &p, &inputs)?.peak_bytes,
            None => run_whole(&graph, &inputs)?.peak_bytes,
        })
    };
    let report = report::Report {
        model: graph.name.clone(),
        layout,
        bands: args.bands,
        runs: args.runs,
        whole_ms: t.whole_ms,
        one_band_ms: t.one_band_ms,
        chunked_ms: t.chunked_ms,
        unbuffered_ms: t.unbuffered_ms,
        kinds,
        joins: run_batched_stats(&graph, chunked, args.bands, true)?.1.joins,
        unbuffered_joins: run_batched_stats(&graph, chunked, args.bands, false)?.1.joins,
        whole_peak: peak(None)?,
        even_peak: peak(Some(Plan::even(&graph, args.units)))?,
        random_peak: peak(Some(Plan::random(&graph, args.units, 1)))?,
        packing: graph.packing_stats(),
        floor: call_floor(&graph, graph.layout(), args.bands, t.whole_ms)?,
    };
    if args.json {
        println!("{}", report.json());
    } else {
        report.print();
    }
    Ok(0)
}
