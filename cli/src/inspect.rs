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

/// Prints op counts by locality class and kind.
///
/// # Errors
/// When the model cannot be loaded.
pub fn run(args: &InspectArgs) -> anyhow::Result<i32> {
    let graph = args.model.load()?;
    let ins = lop::inspect::inspect(&graph);
    if args.json {
        println!("{}", serde_json::to_string(&ins)?);
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
    Ok(0)
}
