//! Measuring a profile: every value of the graph is computed once (a whole run that keeps all
//! values), then each op's [`crate::Op::compute`] is timed on bands of several sizes read from
//! those values, so profiling a model costs a few whole runs.

use super::{DeviceKind, Fit, Hardware, LayoutTrial, OpProfile, PROFILE_VERSION, Profile, SLOW_BAND_FACTOR, SLOW_BAND_FLOOR_S, Sample};
use crate::error::{Error, Result};
use crate::graph::{Graph, Layout};
use crate::ops::{BandIn, Op};
use crate::plan::Side;
use crate::rows::{effective_units, unit_rows};
use std::time::Instant;
use tch::Tensor;

/// What to measure and how.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The side the profile stands for.
    pub role: Side,
    /// Where to run (the graph and inputs are moved there).
    pub device: DeviceKind,
    /// Every measured time is multiplied by this (a K-times slower robot); 1 for none.
    pub dilation: f64,
    /// Timed runs per band size (the median is kept); at least 5.
    pub runs: usize,
    /// Untimed runs before timing each band size.
    pub warmup: usize,
    /// Units per op; band sizes are 1 unit, U/4, U/2, 3U/4 and U units, de-duplicated.
    pub units: usize,
    /// The memory layout to measure in, or both measured and the faster kept.
    pub layout: LayoutChoice,
}

/// Which memory layout a model is measured, and so run, in: `auto` (the faster of both, measured
/// by [`choose_layout`]), `nchw` or `channels_last`. Written so in configs and on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LayoutChoice {
    /// Measure both, keep the faster.
    #[default]
    Auto,
    /// This one.
    Fixed(Layout),
}

impl LayoutChoice {
    /// The layout asked for, `None` for `auto`.
    pub fn fixed(self) -> Option<Layout> {
        match self {
            LayoutChoice::Auto => None,
            LayoutChoice::Fixed(l) => Some(l),
        }
    }

    /// `auto`, `nchw` or `channels_last`.
    pub fn name(self) -> &'static str {
        self.fixed().map_or("auto", Layout::name)
    }
}

impl std::str::FromStr for LayoutChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<LayoutChoice, String> {
        if s.trim() == "auto" {
            return Ok(LayoutChoice::Auto);
        }
        s.parse().map(LayoutChoice::Fixed).map_err(|_| format!("unknown layout '{}' (auto, nchw, channels_last)", s.trim()))
    }
}

impl TryFrom<String> for LayoutChoice {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<LayoutChoice, String> {
        s.parse()
    }
}

impl From<LayoutChoice> for String {
    fn from(c: LayoutChoice) -> String {
        c.name().to_string()
    }
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            role: Side::Robot,
            device: DeviceKind::Cpu,
            dilation: 1.0,
            runs: 5,
            warmup: 1,
            units: 8,
            layout: LayoutChoice::Auto,
        }
    }
}

/// Band sizes (output rows, ascending, distinct) measured for an op with `total` rows.
pub fn band_sizes(total: usize, units: usize, local: bool) -> Vec<usize> {
    if !local {
        return vec![total];
    }
    let u = effective_units(total, units);
    let mut out: Vec<usize> =
        [1, u / 4, u / 2, 3 * u / 4, u].into_iter().filter(|&k| k >= 1).map(|k| unit_rows(total, u, 0..k).len()).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// How many more times, at most, a band size is timed when its median disagrees with the op's
/// other sizes ([`inconsistent`]): a busy machine (another process on the cores, a scheduler
/// tick) adds milliseconds to a few runs, and three slow runs of five make a slow median. On
/// this project's 2-core machine, a planner running beside `lop profile` turned 0.45 ms medians
/// into 8 and 16 ms ones and doubled yolo_det@640's fitted whole-model time.
const RETAKES: usize = 2;

/// Which of one op's band sizes disagree with another size's median: slower than a larger
/// band, or slower than a smaller band's time scaled up to its rows (no kernel of `a + b r`
/// with `a, b >= 0` is), each by [`SLOW_BAND_FACTOR`] and [`SLOW_BAND_FLOOR_S`]. Contention only
/// adds time, so the slower of a disagreeing pair is the suspect. `samples`: (rows, seconds).
fn inconsistent(samples: &[(usize, f64)]) -> Vec<usize> {
    (0..samples.len())
        .filter(|&i| {
            let (rows, t) = samples[i];
            samples.iter().any(|&(other_rows, other)| {
                let expected = match other_rows.cmp(&rows) {
                    std::cmp::Ordering::Greater => other,
                    std::cmp::Ordering::Less => other * rows as f64 / other_rows as f64,
                    std::cmp::Ordering::Equal => return false,
                };
                t >= SLOW_BAND_FACTOR * expected && t - expected >= SLOW_BAND_FLOOR_S
            })
        })
        .collect()
}

/// Each band size's median, from `median_of(rows)`; sizes that disagree with the others
/// ([`inconsistent`]) are timed again, up to [`RETAKES`] rounds, keeping the least median (a
/// busy machine only ever adds time). A size that stays slow, a slower kernel path for small
/// bands (as 3-d convolutions had), keeps its time, and [`Profile::slow_bands`] names it.
/// Returns (rows, median, times it was timed again) per size.
fn sample_sizes(sizes: &[usize], mut median_of: impl FnMut(usize) -> Result<f64>) -> Result<Vec<(usize, f64, usize)>> {
    let mut out = sizes.iter().map(|&rows| Ok((rows, median_of(rows)?))).collect::<Result<Vec<_>>>()?;
    let mut retakes = vec![0; out.len()];
    for _ in 0..RETAKES {
        let suspects = inconsistent(&out);
        if suspects.is_empty() {
            break;
        }
        for i in suspects {
            let again = median_of(out[i].0)?;
            out[i].1 = out[i].1.min(again);
            retakes[i] += 1;
        }
    }
    Ok(out.into_iter().zip(retakes).map(|((rows, t), n)| (rows, t, n)).collect())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Waits `(dilation - 1) x took` after a kernel, as the dilated runtime does after every chunk
/// (DESIGN.md section 9), so that each timed run starts from the state the runtime's kernels
/// start from. On a virtual machine a core left idle for tens of milliseconds wakes slowly and
/// its caches are cold: measured back to back, kernels ran 1.3-3.7x faster than the same
/// kernels run between dilation waits, and the simulator then under-predicted the emulated
/// robot by 40%.
fn dilation_wait(took: std::time::Duration, dilation: f64) {
    if dilation > 1.0 {
        std::thread::sleep(took.mul_f64(dilation - 1.0));
    }
}

/// Waits for the kernels queued on `device`: the CUDA device the tensors are on (not always
/// device 0: an edge serving `cuda:1` measures there), nothing on the CPU.
fn sync(device: tch::Device) {
    if let tch::Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

/// The device `inputs` are on (where the graph was moved too), else `kind`'s.
fn device_of(inputs: &[Tensor], kind: DeviceKind) -> tch::Device {
    inputs.first().map_or(super::torch_device(kind), Tensor::device)
}

/// Computes every value of `graph` whole and keeps them all (inputs from `inputs`).
fn all_values(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    crate::exec::check_inputs(graph, inputs)?;
    let mut values: Vec<Tensor> = Vec::with_capacity(graph.nodes.len());
    let mut next_input = inputs.iter();
    for node in &graph.nodes {
        let t = match &node.op {
            Op::Input => next_input.next().map(|t| t.shallow_clone()).ok_or_else(|| Error::Input("too few inputs".into()))?,
            op => {
                let bands: Vec<BandIn<'_>> =
                    node.inputs.iter().map(|&i| BandIn { tensor: &values[i], start: 0, info: &graph.nodes[i].info }).collect();
                op.compute(&bands, &node.info, &(0..node.info.rows())).map_err(|source| Error::Torch {
                    node: node.name.clone(),
                    op: op.kind_name(),
                    source,
                })?
            }
        };
        values.push(t);
    }
    Ok(values)
}

/// Times op bands of one graph from its whole values ([`all_values`]), each run followed by
/// the dilation wait.
struct BandTimer<'a> {
    graph: &'a Graph,
    values: &'a [Tensor],
    device: tch::Device,
    dilation: f64,
}

impl BandTimer<'_> {
    /// Seconds of one computation of rows `0..rows` of node `id` (then the dilation wait).
    fn once(&self, id: usize, rows: usize) -> Result<f64> {
        let node = &self.graph.nodes[id];
        let bands: Vec<BandIn<'_>> =
            node.inputs.iter().map(|&j| BandIn { tensor: &self.values[j], start: 0, info: &self.graph.nodes[j].info }).collect();
        let t = Instant::now();
        let out = node.op.compute(&bands, &node.info, &(0..rows)).map_err(|source| Error::Torch {
            node: node.name.clone(),
            op: node.op.kind_name(),
            source,
        })?;
        sync(self.device);
        let took = t.elapsed();
        drop(out);
        dilation_wait(took, self.dilation);
        Ok(took.as_secs_f64())
    }

    /// Computes, untimed, the rows of node `id`'s first input that a band `0..rows` of it reads,
    /// when that input is an op: so that the band finds its input in the caches and its weights
    /// not, as a chunk does that follows its producer's chunk in a run.
    fn produce_input(&self, id: usize, rows: usize) -> Result<()> {
        let Some(&producer) = self.graph.nodes[id].inputs.first() else { return Ok(()) };
        if !self.graph.is_op(producer) {
            return Ok(());
        }
        let all = self.graph.nodes[producer].info.rows();
        let need = match self.graph.footprint(id, 0, &(0..rows)) {
            crate::rows::Footprint::Rows(r) => r.end.clamp(1, all),
            _ => all,
        };
        let node = &self.graph.nodes[producer];
        let bands: Vec<BandIn<'_>> =
            node.inputs.iter().map(|&j| BandIn { tensor: &self.values[j], start: 0, info: &self.graph.nodes[j].info }).collect();
        let range = if node.info.row_axis.is_some() { 0..need } else { 0..all };
        drop(node.op.compute(&bands, &node.info, &range).map_err(|source| Error::Torch {
            node: node.name.clone(),
            op: node.op.kind_name(),
            source,
        })?);
        sync(self.device);
        Ok(())
    }

    /// The median of `opts.runs` runs of one size back to back, after `opts.warmup` untimed.
    fn median_back_to_back(&self, id: usize, rows: usize, opts: &ProfileOptions) -> Result<f64> {
        for _ in 0..opts.warmup {
            self.once(id, rows)?;
        }
        let times = (0..opts.runs).map(|_| self.once(id, rows)).collect::<Result<Vec<f64>>>()?;
        Ok(median(times))
    }
}

/// Every op's band sizes timed in passes: each pass times each size of each op once, op after
/// op, so that between two runs of one op every other op ran, as between the chunks of one op
/// in a run; and each run right after its producer computed the rows it reads, so that its
/// input is in the caches as in a run. Timed back to back instead, a band finds its weights in
/// the caches too: a resnet18 band of one row took 95-190 us so, and 170-480 us after two
/// other layers (one core, channels-last), and a server computing a frame in small chunks ran
/// 1.5-1.8x its profile. Returns the times per op and size. `progress` hears the warm-up pass,
/// op by op.
fn timed_in_passes(
    timer: &BandTimer<'_>,
    ids: &[usize],
    sizes: &[Vec<usize>],
    opts: &ProfileOptions,
    progress: &mut impl FnMut(usize, usize, &str),
) -> Result<Vec<Vec<Vec<f64>>>> {
    for (i, &id) in ids.iter().enumerate() {
        progress(i, ids.len(), &timer.graph.nodes[id].name);
        for &rows in &sizes[i] {
            for _ in 0..opts.warmup {
                timer.once(id, rows)?;
            }
        }
    }
    let mut times: Vec<Vec<Vec<f64>>> = sizes.iter().map(|s| vec![Vec::with_capacity(opts.runs); s.len()]).collect();
    let most = sizes.iter().map(Vec::len).max().unwrap_or(0);
    for _ in 0..opts.runs {
        for k in 0..most {
            for ((&id, op_sizes), op_times) in ids.iter().zip(sizes).zip(times.iter_mut()) {
                if let (Some(&rows), Some(t)) = (op_sizes.get(k), op_times.get_mut(k)) {
                    timer.produce_input(id, rows)?;
                    t.push(timer.once(id, rows)?);
                }
            }
        }
    }
    Ok(times)
}

/// Times `graph` in each [`Layout`] and leaves it in the faster one; returns that layout and the
/// trials in [`Layout::ALL`]'s order (NCHW, no trials, and the graph untouched when it has no 2-d
/// or 3-d convolution: the layout changes nothing then).
///
/// Each op is timed whole and on a quarter of its rows (4 bands), so that the choice weighs both
/// ways a plan runs it. The trial runs back to back, without dilation waits: it compares
/// layouts, it does not predict times.
///
/// # Errors
/// As [`profile_graph`].
pub fn choose_layout(graph: &mut Graph, inputs: &[Tensor], device: DeviceKind) -> Result<(Layout, Vec<LayoutTrial>)> {
    let _guard = tch::no_grad_guard();
    let device = device_of(inputs, device);
    let was = graph.layout();
    if !graph.set_layout(was)? {
        return Ok((Layout::Nchw, Vec::new()));
    }
    let mut trials = Vec::with_capacity(Layout::ALL.len());
    for layout in Layout::ALL {
        graph.set_layout(layout)?;
        let values = all_values(graph, inputs)?;
        let (mut whole_s, mut bands_s) = (0.0, 0.0);
        for id in (0..graph.nodes.len()).filter(|&id| graph.is_op(id)) {
            let node = &graph.nodes[id];
            let total = node.info.rows();
            let quarter = if graph.locality(id).is_local() { total.div_ceil(4).max(1) } else { total };
            let bands: Vec<BandIn<'_>> =
                node.inputs.iter().map(|&j| BandIn { tensor: &values[j], start: 0, info: &graph.nodes[j].info }).collect();
            let torch = |source| Error::Torch { node: node.name.clone(), op: node.op.kind_name(), source };
            let time = |rows: usize| -> Result<f64> {
                let range = 0..rows;
                drop(node.op.compute(&bands, &node.info, &range).map_err(torch)?);
                let mut times = Vec::with_capacity(3);
                for _ in 0..3 {
                    let t = Instant::now();
                    drop(node.op.compute(&bands, &node.info, &range).map_err(torch)?);
                    sync(device);
                    times.push(t.elapsed().as_secs_f64());
                }
                Ok(median(times))
            };
            whole_s += time(total)?;
            bands_s += if quarter < total { time(quarter)? * total as f64 / quarter as f64 } else { time(total)? };
        }
        trials.push(LayoutTrial { layout, whole_s, bands_s });
    }
    let best = trials.iter().min_by(|a, b| a.score().total_cmp(&b.score())).map_or(was, |t| t.layout);
    graph.set_layout(best)?;
    Ok((best, trials))
}

/// Measures `graph` (already on `opts.device`) on `inputs` (on the same device), in the layout
/// `opts.layout` names, or in the faster one ([`choose_layout`]) for `auto`; the graph is
/// left in that layout. `progress(done, total, node_name)` is called before each op.
///
/// # Errors
/// [`Error::Input`] for bad options or inputs; libtorch errors naming the node.
pub fn profile_graph(
    graph: &mut Graph,
    inputs: &[Tensor],
    opts: &ProfileOptions,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Profile> {
    if opts.runs < 5 {
        return Err(Error::Input(format!("at least 5 timed runs per band size are needed, got {}", opts.runs)));
    }
    if !opts.dilation.is_finite() || opts.dilation <= 0.0 {
        return Err(Error::Input(format!("dilation must be positive, got {}", opts.dilation)));
    }
    if opts.units == 0 {
        return Err(Error::Input("units must be >= 1".into()));
    }
    let _guard = tch::no_grad_guard();
    let model_hash = graph.content_hash()?;
    // The layout measured in, recorded as chosen: a graph's own strides cannot always tell
    // (a 1x1 or depthwise weight lies the same in both).
    let (layout, trials) = match opts.layout.fixed() {
        Some(l) => {
            graph.set_layout(l)?;
            (l, Vec::new())
        }
        None => choose_layout(graph, inputs, opts.device)?,
    };
    let graph = &*graph;
    let device = device_of(inputs, opts.device);
    let values = all_values(graph, inputs)?;
    let ids: Vec<usize> = (0..graph.nodes.len()).filter(|&id| graph.is_op(id)).collect();
    let sizes: Vec<Vec<usize>> =
        ids.iter().map(|&id| band_sizes(graph.nodes[id].info.rows(), opts.units, graph.locality(id).is_local())).collect();
    let timer = BandTimer { graph, values: &values, device, dilation: opts.dilation };
    let passes = timed_in_passes(&timer, &ids, &sizes, opts, &mut progress)?;
    let mut ops = Vec::with_capacity(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        let node = &graph.nodes[id];
        // First each size's median over the passes; a size timed again (its median disagreed
        // with the op's others) is timed on its own, back to back.
        let mut first = passes[i].iter().map(|v| median(v.clone()));
        let samples: Vec<Sample> = sample_sizes(&sizes[i], |rows| match first.next() {
            Some(m) => Ok(m),
            None => timer.median_back_to_back(id, rows, opts),
        })?
        .into_iter()
        .map(|(rows, raw, retakes)| Sample { rows, median_s: raw * opts.dilation, raw_median_s: raw, runs: opts.runs, retakes })
        .collect();
        let retimed = samples.iter().filter(|s| s.retakes > 0).count();
        if retimed > 0 {
            tracing::info!(op = %node.name, retimed, "band sizes timed again: their medians disagreed with the op's other sizes");
        }
        let points: Vec<(f64, f64)> = samples.iter().map(|s| (s.rows as f64, s.median_s)).collect();
        ops.push(OpProfile {
            id,
            name: node.name.clone(),
            kind: node.op.kind_name().to_string(),
            out_rows: node.info.rows(),
            out_bytes_per_row: node.info.bytes_of_rows(1),
            local: graph.locality(id).is_local(),
            samples,
            fit: Fit::from_points(&points),
        });
    }
    progress(ids.len(), ids.len(), "");
    Ok(Profile {
        version: PROFILE_VERSION,
        model: graph.name.clone(),
        model_hash,
        role: opts.role,
        device: opts.device,
        dilation: opts.dilation,
        dilation_waits: opts.dilation > 1.0,
        threads: usize::try_from(tch::get_num_threads()).unwrap_or(0),
        units: opts.units,
        hardware: hardware(),
        layout,
        layout_trials: trials,
        codecs: Vec::new(),
        ops,
    })
}

/// The machine this process runs on: CPU model, cores, libtorch version, CUDA devices.
pub fn hardware() -> Hardware {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model") || l.starts_with("Hardware"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    Hardware { cpu_model, cores, libtorch: libtorch_version(), cuda_devices: tch::Cuda::device_count() }
}

/// The libtorch version, from `$LIBTORCH/build-version` or the `version.py` of the torch
/// package whose `lib` directory is on `LD_LIBRARY_PATH`.
fn libtorch_version() -> Option<String> {
    if let Ok(dir) = std::env::var("LIBTORCH")
        && let Ok(v) = std::fs::read_to_string(std::path::Path::new(&dir).join("build-version"))
    {
        return Some(v.trim().to_string());
    }
    let paths = std::env::var("LD_LIBRARY_PATH").ok()?;
    paths.split(':').filter(|p| p.ends_with("torch/lib")).find_map(|p| {
        let py = std::path::Path::new(p).parent()?.join("version.py");
        let text = std::fs::read_to_string(py).ok()?;
        let line = text.lines().find(|l| l.starts_with("__version__"))?;
        Some(line.split_once('=')?.1.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::{RETAKES, inconsistent, sample_sizes};

    /// Every size of every op timed once per pass, `runs` passes, each time positive; progress
    /// heard once per op; producers of ops computed on the rows their band reads.
    #[test]
    fn passes_time_every_size_of_every_op_runs_times() {
        let g = crate::zoo::build("resnet18@32x32").expect("zoo");
        let inputs = crate::exec::synthetic_inputs(&g, 1).expect("inputs");
        let values = super::all_values(&g, &inputs).expect("values");
        let timer = super::BandTimer { graph: &g, values: &values, device: tch::Device::Cpu, dilation: 1.0 };
        let ids: Vec<usize> = (0..g.nodes.len()).filter(|&id| g.is_op(id)).collect();
        let sizes: Vec<Vec<usize>> =
            ids.iter().map(|&id| super::band_sizes(g.nodes[id].info.rows(), 8, g.locality(id).is_local())).collect();
        let opts = super::ProfileOptions {
            role: crate::plan::Side::Server,
            device: super::DeviceKind::Cpu,
            dilation: 1.0,
            runs: 5,
            warmup: 1,
            units: 8,
            layout: Default::default(),
        };
        let mut heard = 0;
        let times = super::timed_in_passes(&timer, &ids, &sizes, &opts, &mut |_, _, _| heard += 1).expect("passes");
        assert_eq!(heard, ids.len());
        assert_eq!(times.len(), ids.len());
        for (t, s) in times.iter().zip(&sizes) {
            assert_eq!(t.len(), s.len());
            assert!(t.iter().all(|runs| runs.len() == 5 && runs.iter().all(|&x| x > 0.0)), "{t:?}");
        }
        // A band's producer computes the rows the band reads.
        for (&id, s) in ids.iter().zip(&sizes) {
            timer.produce_input(id, s[0]).expect("producer");
        }
    }

    #[test]
    fn medians_that_no_kernel_of_a_plus_b_rows_gives_are_suspects() {
        // Linear, or with a launch cost: consistent.
        assert!(inconsistent(&[(4, 1e-3), (8, 2e-3), (16, 4e-3)]).is_empty());
        assert!(inconsistent(&[(1, 2e-3), (8, 2.2e-3), (16, 2.4e-3)]).is_empty());
        // A large band slower than a smaller one scaled up (yolo_det's model.5.conv beside a
        // planner: 0.45 ms at 30 rows, 16 ms at 40).
        assert_eq!(inconsistent(&[(5, 1.0e-4), (10, 1.7e-4), (20, 3.0e-4), (30, 4.5e-4), (40, 1.6e-2)]), vec![4]);
        // A small band slower than a larger one.
        assert_eq!(inconsistent(&[(2, 8.2e-6), (5, 1.8e-5), (10, 8.0e-3), (15, 4.0e-3), (20, 3.7e-5)]), vec![2, 3]);
        // Differences below the floor are noise, not contention.
        assert!(inconsistent(&[(1, 3e-5), (8, 1e-5)]).is_empty());
    }

    #[test]
    fn a_contended_size_is_timed_again_and_a_slow_path_keeps_its_time() {
        // The first timing of 40 rows was contended; timed again it agrees with the others.
        let mut calls = Vec::new();
        let out = sample_sizes(&[10, 20, 40], |rows| {
            calls.push(rows);
            Ok(if rows == 40 && calls.iter().filter(|&&r| r == 40).count() == 1 { 16e-3 } else { rows as f64 * 1e-5 })
        })
        .expect("timed");
        assert_eq!(out, vec![(10, 1e-4, 0), (20, 2e-4, 0), (40, 4e-4, 1)]);
        assert_eq!(calls, vec![10, 20, 40, 40]);
        // A small band that is slow every time (a reference kernel for small bands) keeps its
        // time after the retakes, and is timed no more than that.
        let mut count = 0;
        let out = sample_sizes(&[1, 8], |rows| {
            count += 1;
            Ok(if rows == 1 { 5e-3 } else { 1e-3 })
        })
        .expect("timed");
        assert_eq!(out, vec![(1, 5e-3, RETAKES), (8, 1e-3, 0)]);
        assert_eq!(count, 2 + RETAKES);
        // A failing timing is an error, not a sample.
        assert!(sample_sizes(&[1, 8], |_| Err(crate::error::Error::Input("no".into()))).is_err());
    }
}
