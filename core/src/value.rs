//! What a value is, apart from the graph that computes it: its element type, its static shape and
//! row axis ([`ValueInfo`]), and the memory layout a side keeps its tensors in ([`Layout`]). The
//! graph, the ops, the codecs and the postprocessing stages all speak of values; none of them
//! needs the others for it.

/// Element type of a value as it crosses the graph (and the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Raw camera bytes.
    U8,
    /// Activations.
    F32,
    /// Integer indices (shape arithmetic, folded away at import; top-k indices, labels).
    I64,
    /// Truth values (comparisons, masks).
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32 => 4,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }
}

/// Static description of a value: shape, dtype and which axis is the row axis.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValueInfo {
    /// Full static shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// The axis along which bands are cut, if the value has one. `None` means the value is a
    /// single block (a flattened vector): it always moves and is computed whole.
    pub row_axis: Option<usize>,
}

impl ValueInfo {
    /// A value with the conventional row axis: axis 2 (H of NCHW, D of NCDHW) for rank >= 3.
    pub fn new(shape: Vec<usize>, dtype: DType) -> Self {
        let row_axis = if shape.len() >= 3 { Some(2) } else { None };
        ValueInfo { shape, dtype, row_axis }
    }
    /// Number of rows: the extent of the row axis, or 1 for values without one.
    pub fn rows(&self) -> usize {
        self.row_axis.map_or(1, |a| self.shape[a])
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes of `rows` rows of this value.
    pub fn bytes_of_rows(&self, rows: usize) -> usize {
        let total = self.rows().max(1);
        self.numel() / total * rows * self.dtype.size()
    }
    /// Bytes of the whole value.
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

/// How convolution weights, and so the activations convolutions produce, lie in memory.
///
/// A row band of a channels-last activation is one contiguous block, so banded convolutions skip
/// the gather an NCHW band needs: resnet18 in 4 bands ran 1.65x faster on this project's CPU. The
/// gain differs per model and device (convnext_tiny: a tie), so `lop profile` measures both per
/// model and records the faster in the profile (`lop::profile::Profile::layout`); each side loads its model in
/// its own profile's layout (`lop::model::LoadOptions::layout`). Values are unchanged but for
/// rounding: bands cross the link as plain NCHW bytes, and the content hash reads weights
/// contiguously, so the layout is each side's private choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Row-major NCHW (NCDHW), libtorch's default.
    #[default]
    Nchw,
    /// Channels innermost (NHWC, NDHWC) strides under the same NCHW shape.
    ChannelsLast,
}

impl Layout {
    /// Both layouts, in the order `lop profile` measures them.
    pub const ALL: [Layout; 2] = [Layout::Nchw, Layout::ChannelsLast];

    /// The name used in profiles, configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Nchw => "nchw",
            Layout::ChannelsLast => "channels_last",
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Layout, String> {
        match s.trim().replace('-', "_").as_str() {
            "nchw" => Ok(Layout::Nchw),
            "channels_last" => Ok(Layout::ChannelsLast),
            other => Err(format!("unknown layout '{other}' (nchw, channels_last)")),
        }
    }
}
