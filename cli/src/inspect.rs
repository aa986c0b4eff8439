//! `lop inspect MODEL [--json]`.

use crate::ModelArgs;

/// Arguments of `lop inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Prints op counts by locality class and kind (of the model as it is, before fusion), and
/// which activations the engine folds into convolutions and which it leaves, with the reason.
///
/// # Errors
/// When the model cannot be loaded.
pub fn run(args: &InspectArgs) -> anyhow::Result<i32> {
    use anyhow::Context;
    let opts = lop::model::LoadOptions { unfused: true, ..args.model.load_options() };
    let graph = lop::model::load(&args.model.model, &opts).with_context(|| format!("loading model '{}'", args.model.model))?;
    let ins = lop::inspect::inspect(&graph);
    let (_, fusion) = lop::fuse::fuse_activations(graph);
    if args.json {
        let mut v = serde_json::to_value(&ins)?;
        v["fusion"] = serde_json::to_value(&fusion)?;
        v["fusion"]["applied"] = args.model.load_options().fuses().into();
        println!("{v}");
        return Ok(0);
    }
    println!("model      {}", ins.model);
    println!("inputs     {:?}", ins.input_shapes);
    println!("outputs    {:?}", ins.output_shapes);
    println!("parameters {}", ins.parameters);
    println!("ops        {} ({} local, {} global)", ins.ops, ins.local, ins.global);
    for (class, n) in &ins.classes {
        println!("  {:<13} {n}", serde_json::to_value(class)?.as_str().unwrap_or("?"));
    }
    println!("by kind");
    for (kind, n) in &ins.kinds {
        println!("  {kind:<20} {n}");
    }
    print_fusion(&fusion, args.model.load_options().fuses());
    Ok(0)
}

/// The fusion report: counts per activation, the linear layers' and GELUs' folds, then every
/// activation left separate and why.
fn print_fusion(fusion: &lop::fuse::Fusion, applied: bool) {
    let mut by_act = std::collections::BTreeMap::<&str, usize>::new();
    for f in &fusion.fused {
        *by_act.entry(f.act.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = by_act.iter().map(|(a, n)| format!("{n} {a}")).collect();
    let state = if applied { "" } else { " (not applied: LOP_FUSE=off)" };
    println!("fused      {} convolutions take their activation{state}: {}", fusion.fused.len(), counts.join(", "));
    if !fusion.rewritten.is_empty() {
        let mut by_kind = std::collections::BTreeMap::<&str, (usize, usize)>::new();
        for r in &fusion.rewritten {
            let e = by_kind.entry(r.into.as_str()).or_default();
            e.0 += 1;
            e.1 += r.removed.len();
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, (n, gone))| format!("{n} {k} ({gone} ops folded)")).collect();
        println!("fused      {}{state}", kinds.join(", "));
    }
    if !fusion.unfused.is_empty() {
        println!("not fused  {} activations after a convolution stay separate ops:", fusion.unfused.len());
        for u in &fusion.unfused {
            println!("  {:<24} {:<10} {}", u.node, u.kind, u.why);
        }
    }
}
