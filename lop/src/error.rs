//! The engine's error type.

use std::path::PathBuf;

/// Everything that can go wrong in the engine. Variants name the node, op, shapes or path
/// involved so that a message alone is enough to find the problem.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libtorch rejected a computation (bad shapes reaching a kernel, out of memory, ...).
    #[error("libtorch failed at node '{node}' ({op}): {source}")]
    Torch {
        /// Node name.
        node: String,
        /// Op kind.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: tch::TchError,
    },
    /// A libtorch call outside any node (loading files, building weights).
    #[error("libtorch failed while {context}: {source}")]
    TorchContext {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: tch::TchError,
    },
    /// Shapes or attributes that do not fit an op.
    #[error("shape error at node '{node}' ({op}): {msg}")]
    Shape {
        /// Node name.
        node: String,
        /// Op kind.
        op: String,
        /// What does not fit, with the numbers.
        msg: String,
    },
    /// An ONNX op (or an attribute value of one) that the engine does not implement.
    #[error("unsupported op '{op_type}' at node '{node}' (opset {opset}): {reason}")]
    Unsupported {
        /// Node name.
        node: String,
        /// ONNX op type.
        op_type: String,
        /// Opset of the default domain.
        opset: i64,
        /// Why it is not supported.
        reason: String,
    },
    /// Every op type of a model that the engine cannot run, found in one pass before anything
    /// is converted, so that a user learns all of them at once.
    #[error("model '{model}' (opset {opset}) uses {} op type(s) the engine does not support: {}", .ops.len(), crate::error::list_missing(.ops))]
    UnsupportedOps {
        /// The model's name.
        model: String,
        /// Opset of the default domain.
        opset: i64,
        /// Each missing op type with the nodes that use it, in the order they first appear.
        ops: Vec<MissingOp>,
    },
    /// A model file that cannot be decoded or is internally inconsistent.
    #[error("malformed model: {0}")]
    Malformed(String),
    /// A plan or band layout that is not valid for the graph it is applied to.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// A frame that does not encode or decode with its codec, or a codec a model's input cannot
    /// take.
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// The executor was asked to compute rows whose inputs it does not hold.
    #[error("node '{node}' on {side} needs rows {need:?} of '{value}' but holds {held:?}")]
    MissingRows {
        /// The node being computed.
        node: String,
        /// Which side.
        side: &'static str,
        /// The input value.
        value: String,
        /// The rows needed.
        need: std::ops::Range<usize>,
        /// The rows held, if any.
        held: Option<std::ops::Range<usize>>,
    },
    /// User input (a tensor, a file, a model name) that does not fit.
    #[error("bad input: {0}")]
    Input(String),
    /// A model name that is neither a zoo model nor an existing file.
    #[error("unknown model '{name}' (zoo models: {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: String,
    },
    /// A file that could not be read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// What the pure parts refuse beyond the variants above (`lop_core`): a plan that cannot
    /// run under the given conditions, a profile that does not fit its model or is not sane.
    #[error(transparent)]
    Core(lop_core::Error),
}

/// One op type a model uses that the engine cannot run, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingOp {
    /// ONNX op type (with its domain when not the default one).
    pub op_type: String,
    /// Names of the nodes of that type.
    pub nodes: Vec<String>,
}

/// Nodes named per missing op before the rest are counted.
const NODES_NAMED: usize = 3;

/// `GridSample at 3 nodes ('a', 'b', 'c'); TopK at 1 node ('d')`.
pub(crate) fn list_missing(ops: &[MissingOp]) -> String {
    let one = |m: &MissingOp| {
        let mut names: Vec<String> = m.nodes.iter().take(NODES_NAMED).map(|n| format!("'{n}'")).collect();
        if m.nodes.len() > NODES_NAMED {
            names.push(format!("{} more", m.nodes.len() - NODES_NAMED));
        }
        let plural = if m.nodes.len() == 1 { "" } else { "s" };
        format!("{} at {} node{plural} ({})", m.op_type, m.nodes.len(), names.join(", "))
    };
    ops.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// The engine's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn shape(node: &str, op: &str, msg: impl Into<String>) -> Self {
        Error::Shape { node: node.to_string(), op: op.to_string(), msg: msg.into() }
    }
    pub(crate) fn torch(context: impl Into<String>) -> impl FnOnce(tch::TchError) -> Self {
        let context = context.into();
        move |source| Error::TorchContext { context, source }
    }
}

/// The pure parts' refusals (`lop_core`: plans, profiles, the simulator, a fleet's numbers) as
/// the engine's variant of the same name where it has one, else as [`Error::Core`]; the message
/// is the same either way.
impl From<lop_core::Error> for Error {
    fn from(e: lop_core::Error) -> Self {
        use lop_core::Error as Core;
        match e {
            Core::Input(msg) => Error::Input(msg),
            Core::Plan(msg) => Error::Plan(msg),
            Core::Frame(e) => Error::Codec(e.into()),
            Core::Malformed(msg) => Error::Malformed(msg),
            Core::Io { path, source } => Error::Io { path, source },
            e @ (Core::Infeasible(_) | Core::ProfileModel { .. } | Core::ProfileMissingOp { .. } | Core::ProfileInvalid { .. }) => {
                Error::Core(e)
            }
        }
    }
}

/// A codec's name or a model input that does not fit a codec (`lop_core::frame`), as the
/// codecs' own [`Error::Codec`], with the same message.
impl From<lop_core::frame::FrameError> for Error {
    fn from(e: lop_core::frame::FrameError) -> Self {
        Error::Codec(e.into())
    }
}

/// One line for a person: the error and its causes, joined by ": ", each cause left out where
/// the text before it already ends with it (this crate's errors, like many, quote their cause
/// in their own message and also return it as their source, so a plain walk of the chain
/// would print every OS or libtorch message twice).
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another without quoting it, as `anyhow`'s context does.
    #[derive(Debug)]
    struct Context(&'static str, Error);

    impl std::fmt::Display for Context {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Context {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    /// The pure parts' errors keep their variant where the engine has one, and their message
    /// either way (callers match `Error::Plan`; people read the message).
    #[test]
    fn core_errors_keep_their_variant_and_message() {
        let plan = lop_core::Error::Plan("no such bucket".into());
        let text = plan.to_string();
        let e = Error::from(plan);
        assert!(matches!(&e, Error::Plan(m) if m == "no such bucket"), "{e:?}");
        assert_eq!(e.to_string(), text);
        let infeasible = lop_core::Error::Infeasible("no link".into());
        let text = infeasible.to_string();
        let e = Error::from(infeasible);
        assert!(matches!(&e, Error::Core(lop_core::Error::Infeasible(_))), "{e:?}");
        assert_eq!(e.to_string(), text);
        let frame = lop_core::Error::Frame(lop_core::frame::FrameError::Quality(0));
        let text = frame.to_string();
        let e = Error::from(frame);
        assert!(matches!(&e, Error::Codec(_)), "{e:?}");
        assert_eq!(e.to_string(), text);
        let missing = lop_core::Error::ProfileMissingOp { node: "relu".into(), id: 3 };
        assert_eq!(Error::from(missing).to_string(), "profile has no timings for op 'relu' (node 3)");
    }

    #[test]
    fn report_names_each_cause_once() {
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let os = missing.to_string();
        let e = Context("robot profile", Error::Io { path: "/nonexistent/lop-report-test".into(), source: missing });
        let line = report(&e);
        assert_eq!(line, format!("robot profile: i/o error on /nonexistent/lop-report-test: {os}"));
        assert_eq!(line.matches(&os).count(), 1, "{line}");
        // A cause the message does not quote is kept.
        let plain = Context("loading", Error::Plan("no such bucket".into()));
        assert_eq!(report(&plain), "loading: invalid plan: no such bucket");
    }
}
