//! `lop run MODEL --input X.npy|PICTURE.jpg|PICTURE.png --output Y.npy [--split random:SEED]`.

use crate::ModelArgs;
use anyhow::{Context, bail};
use lop::exec::{run_split, run_whole};
use lop::plan::Plan;
use std::path::{Path, PathBuf};

/// Arguments of `lop run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Input tensor (`.npy`), or a JPEG or PNG picture at the model's input size (decoded by the
    /// decoders lop_robot and lop_edge use: the input a `CompressedImage` frame at that size
    /// gives); for several graph inputs, repeat the flag in order.
    #[arg(long, required = true)]
    pub input: Vec<PathBuf>,
    /// Output file; with several graph outputs, `Y.0.npy`, `Y.1.npy`, ...
    #[arg(long)]
    pub output: PathBuf,
    /// `whole` (default), `robot`, `server`, `even` or `random:SEED`.
    #[arg(long, default_value = "whole")]
    pub split: String,
    /// Units per op for split layouts.
    #[arg(long, default_value_t = 8)]
    pub units: usize,
}

/// Where output `i` of `n` is written.
pub fn output_path(base: &Path, i: usize, n: usize) -> PathBuf {
    if n == 1 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    base.with_file_name(format!("{stem}.{i}.npy"))
}

/// A JPEG or PNG file as a `[1, C, H, W]` uint8 tensor (C = 3, RGB; or 1 for a grey PNG), as
/// decoded by [`lop::codec::photo`]; `None` for a file that is neither (a `.npy`).
///
/// # Errors
/// A picture that does not read or decode.
fn picture_input(path: &Path) -> anyhow::Result<Option<tch::Tensor>> {
    let mut head = [0u8; 8];
    let n = std::io::Read::read(&mut std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?, &mut head)?;
    if lop::codec::photo::Format::sniff(&head[..n]).is_none() {
        return Ok(None);
    }
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let p = lop::codec::photo::decode_picture(&data).with_context(|| format!("decoding {}", path.display()))?;
    let channels = if p.channels == 1 { 1 } else { 3 };
    let plane = p.width * p.height;
    let mut planar = vec![0u8; channels * plane];
    for (i, px) in p.pixels.chunks_exact(p.channels).enumerate() {
        for c in 0..channels {
            planar[c * plane + i] = px[c];
        }
    }
    let dims = [1, channels as i64, p.height as i64, p.width as i64];
    Ok(Some(tch::Tensor::from_slice(&planar).reshape(dims)))
}

/// Runs one inference and writes every output.
///
/// # Errors
/// Bad `.npy` files (dtype, shape), unknown split, execution failures.
pub fn run(args: &RunArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.units > 0, "--units {}: must be at least 1", args.units);
    let mut inputs = Vec::new();
    for p in &args.input {
        anyhow::ensure!(p.exists(), "input file {} does not exist", p.display());
        let t = match picture_input(p)? {
            Some(t) => t,
            None => tch::Tensor::read_npy(p).with_context(|| format!("reading {} (a .npy file)", p.display()))?,
        };
        inputs.push(t);
    }
    // A model with dynamic dimensions takes them from the (first) input array unless
    // --input-shape says otherwise; static dimensions are checked against it at import.
    let graph = match (&args.model.input_shape, inputs.first()) {
        (None, Some(first)) if !args.model.model.starts_with("zoo:") => {
            let shape = first.size().iter().map(|&d| usize::try_from(d)).collect::<Result<Vec<_>, _>>()?;
            ModelArgs {
                input_shape: Some(shape),
                preprocess: args.model.preprocess.clone(),
                task: args.model.task.clone(),
                camera_fit: args.model.camera_fit,
                model: args.model.model.clone(),
            }
            .load()?
        }
        _ => args.model.load()?,
    };
    let outputs = match args.split.as_str() {
        "whole" => run_whole(&graph, &inputs)?.outputs,
        s => {
            let plan = match s {
                "robot" => Plan::robot_only(&graph, args.units),
                "server" => Plan::server_only(&graph, args.units),
                "even" => Plan::even(&graph, args.units),
                _ => match s.strip_prefix("random:").map(str::parse::<u64>) {
                    Some(Ok(seed)) => Plan::random(&graph, args.units, seed),
                    _ => bail!("unknown --split '{s}' (whole, robot, server, even, random:SEED)"),
                },
            };
            let r = run_split(&graph, &plan, &inputs)?;
            eprintln!("split {s}: {} B up, {} B down", r.bytes_up, r.bytes_down);
            r.outputs
        }
    };
    for (i, o) in outputs.iter().enumerate() {
        let path = output_path(&args.output, i, outputs.len());
        o.to_device(tch::Device::Cpu).write_npy(&path).with_context(|| format!("writing {}", path.display()))?;
        println!("{} {:?} -> {}", graph.nodes[graph.outputs[i]].name, o.size(), path.display());
        if let Some(summary) = args.model.task.as_ref().and_then(|t| t.summary(o, 10)) {
            println!("  {summary}");
        }
    }
    Ok(0)
}
