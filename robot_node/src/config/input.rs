//! How the robot's input arrives and becomes the model's: camera or LiDAR ([`InputKind`]), the
//! image settings ([`ImageSettings`], with the camera's size that the model fits itself) and
//! transport ([`Transport`]), the point cloud's grid ([`CloudGrid`]), and the readers of their
//! parameters (`input`, `input_qos`, `image.*`, `cloud.*`).

use super::values::{invalid, range, u32_param};
use crate::convert::{BevChannels, BevGrid, ChannelOrder, Fit, VoxelGrid};
use crate::error::Result;
use crate::params::Params;

/// What the robot feeds its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `sensor_msgs/Image` frames.
    Camera,
    /// `sensor_msgs/PointCloud2` sweeps.
    Lidar,
}

/// How camera frames arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// `sensor_msgs/Image` on `topics.image`.
    #[default]
    Raw,
    /// `sensor_msgs/CompressedImage` (JPEG or PNG) on `<topics.image>/compressed`.
    Compressed,
}

impl Transport {
    /// The topic frames arrive on, for the image topic `image`.
    pub fn topic(self, image: &str) -> String {
        match self {
            Transport::Raw => image.to_string(),
            Transport::Compressed => format!("{}/compressed", image.trim_end_matches('/')),
        }
    }
}

impl Transport {
    /// `raw` or `compressed`, the value of parameter `name`.
    pub(super) fn parse(name: &str, s: &str) -> Result<Transport> {
        match s {
            "raw" => Ok(Transport::Raw),
            "compressed" => Ok(Transport::Compressed),
            other => Err(invalid(format!("{name} must be raw or compressed, got '{other}'"))),
        }
    }

    /// The parameter's word for it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Transport::Raw => "raw",
            Transport::Compressed => "compressed",
        }
    }
}

/// `auto` (`None`), `resize` or `letterbox` (at `pad`), the value of parameter `name`.
pub(super) fn parse_fit(name: &str, s: &str, pad: u8) -> Result<Option<Fit>> {
    match s {
        "auto" => Ok(None),
        "resize" => Ok(Some(Fit::Resize)),
        "letterbox" => Ok(Some(Fit::Letterbox { pad })),
        other => Err(invalid(format!("{name} must be auto, resize or letterbox, got '{other}'"))),
    }
}

/// The parameter's word for a fit (`None`: `auto`).
pub(super) fn fit_name(fit: Option<Fit>) -> &'static str {
    match fit {
        None => "auto",
        Some(Fit::Resize) => "resize",
        Some(Fit::Letterbox { .. }) => "letterbox",
    }
}

/// Image settings (0 means "from the model's input shape").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageSettings {
    /// Rows (0: the model's).
    pub height: u32,
    /// Columns (0: the model's).
    pub width: u32,
    /// Channel order of a colour input.
    pub order: ChannelOrder,
    /// Resize or letterbox; `None` (`auto`): letterbox for detectors and other models with dense
    /// outputs (boxes must keep the frame's aspect ratio), resize for classifiers.
    pub fit: Option<Fit>,
    /// The padding value of a letterbox (`auto` included).
    pub pad: u8,
    /// `sensor_msgs/Image` on the image topic, or `sensor_msgs/CompressedImage` on
    /// `<image topic>/compressed` (image_transport's convention).
    pub transport: Transport,
    /// Most pixels a compressed frame may decode to, checked from its headers before anything is
    /// allocated (`image.max_pixels`); 0: [`ImageSettings::max_pixels_for`]'s default.
    pub max_pixels: u64,
    /// The camera's frame size, columns and rows (`image.camera_size: WxH`; `None`: not given).
    /// The model then takes frames at this size and fits them itself (`image.fit`, letterbox
    /// unless told otherwise), so the camera's JPEG crosses unchanged under `passthrough`
    /// whatever its size; frames of another size are refused, naming both.
    pub camera_size: Option<(u32, u32)>,
}

/// The default cap on a compressed frame's pixels, whatever the model: a 4K camera's.
pub const MIN_DEFAULT_MAX_PIXELS: usize = 3840 * 2160;

impl ImageSettings {
    /// The cap on a compressed frame's pixels for a model input of `width` x `height`: the
    /// configured one, or 16 times the model's input and at least a 4K frame. A 20-megapixel PNG,
    /// 80 MB decoded, costs a 640x640 detector nothing it needs.
    pub fn max_pixels_for(&self, width: u32, height: u32) -> usize {
        match usize::try_from(self.max_pixels) {
            Ok(0) | Err(_) => (16 * width as usize * height as usize).max(MIN_DEFAULT_MAX_PIXELS),
            Ok(n) => n,
        }
    }
}

/// The model's own fitting of the camera's frames (`image.camera_size: WxH`, `""`: none): at
/// the configured fit, letterbox (at `pad`) when it is `auto`.
fn camera_fit(
    size: &str,
    fit: Option<Fit>,
    pad: u8,
    (height, width): (u32, u32),
) -> std::result::Result<Option<lop::fit::FrameFit>, String> {
    if size.trim().is_empty() {
        return Ok(None);
    }
    if height != 0 || width != 0 {
        return Err(format!(
            "image.camera_size {size} with image.height/image.width {height}x{width}: with a camera size the model fits frames itself; leave image.height and image.width at 0"
        ));
    }
    let how = match fit.unwrap_or(Fit::Letterbox { pad }) {
        Fit::Resize => "resize".to_string(),
        Fit::Letterbox { pad } => format!("letterbox:{pad}"),
    };
    lop::fit::FrameFit::parse(&format!("{how}@{}", size.trim()))
        .map(Some)
        .map_err(|e| format!("image.camera_size must be WxH (e.g. 640x480), got '{size}': {e}"))
}

/// How a point cloud becomes the model's input.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudGrid {
    /// A bird's-eye-view grid (CHW f32).
    Bev(BevGrid),
    /// An occupancy voxel grid.
    Voxels(VoxelGrid),
}

impl InputKind {
    /// `input`: `camera` or `lidar`.
    pub(super) fn parse(s: &str) -> Result<InputKind> {
        match s {
            "camera" => Ok(InputKind::Camera),
            "lidar" => Ok(InputKind::Lidar),
            other => Err(invalid(format!("input must be camera or lidar, got '{other}'"))),
        }
    }
}

/// `input_qos`: `sensor_data` (best effort) or `reliable`.
pub(super) fn input_qos(s: &str) -> Result<crate::backend::Qos> {
    match s {
        "sensor_data" => Ok(crate::backend::Qos::SensorData),
        "reliable" => Ok(crate::backend::Qos::Default),
        other => Err(invalid(format!("input_qos must be sensor_data or reliable, got '{other}'"))),
    }
}

impl ImageSettings {
    /// Reads `image.*`, with the model's own fit of the camera's frames when `image.camera_size`
    /// is given (it also sets the image's fit).
    pub(super) fn read(p: &mut Params) -> Result<(ImageSettings, Option<lop::fit::FrameFit>)> {
        let order = match p.string("image.channel_order", "rgb").as_str() {
            "rgb" => ChannelOrder::Rgb,
            "bgr" => ChannelOrder::Bgr,
            other => return Err(invalid(format!("image.channel_order must be rgb or bgr, got '{other}'"))),
        };
        let pad = p.int("image.pad", 0)?;
        let pad = u8::try_from(pad).map_err(|_| invalid(format!("image.pad must be 0..=255, got {pad}")))?;
        let fit = parse_fit("image.fit", &p.string("image.fit", "auto"), pad)?;
        let transport = Transport::parse("image.transport", &p.string("image.transport", "raw"))?;
        let max_pixels = p.int("image.max_pixels", 0)?;
        let max_pixels =
            u64::try_from(max_pixels).map_err(|_| invalid(format!("image.max_pixels must be 0 (auto) or more, got {max_pixels}")))?;
        let (height, width) = (u32_param(p, "image.height", 0)?, u32_param(p, "image.width", 0)?);
        let camera_fit = camera_fit(&p.string("image.camera_size", ""), fit, pad, (height, width)).map_err(invalid)?;
        let image = ImageSettings {
            height,
            width,
            order,
            fit: camera_fit.map(|f| f.fit).or(fit),
            pad,
            transport,
            max_pixels,
            camera_size: camera_fit.map(|f| (f.width as u32, f.height as u32)),
        };
        Ok((image, camera_fit))
    }
}

impl CloudGrid {
    /// Reads `cloud.*`: the grid's ranges and size, and a BEV grid's features.
    pub(super) fn read(p: &mut Params) -> Result<CloudGrid> {
        let (x, y, z) =
            (range(p, "cloud.x_range", (0.0, 102.4))?, range(p, "cloud.y_range", (-51.2, 51.2))?, range(p, "cloud.z_range", (-3.0, 1.0))?);
        let (rows, cols, depth) = (u32_param(p, "cloud.rows", 0)?, u32_param(p, "cloud.cols", 0)?, u32_param(p, "cloud.depth", 0)?);
        let names = p.string("cloud.bev_features", "occupancy,max_height,mean_intensity,density");
        let cloud = match p.string("cloud.grid", "bev").as_str() {
            "bev" => {
                let mut channels = BevChannels { occupancy: false, max_height: false, mean_intensity: false, density: false };
                for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    match n {
                        "occupancy" => channels.occupancy = true,
                        "max_height" => channels.max_height = true,
                        "mean_intensity" => channels.mean_intensity = true,
                        "density" => channels.density = true,
                        other => return Err(invalid(format!("cloud.bev_features: unknown feature '{other}'"))),
                    }
                }
                CloudGrid::Bev(BevGrid { x_range: x, y_range: y, z_range: z, rows, cols, channels })
            }
            "voxels" => CloudGrid::Voxels(VoxelGrid { x_range: x, y_range: y, z_range: z, rows, cols, depth }),
            other => return Err(invalid(format!("cloud.grid must be bev or voxels, got '{other}'"))),
        };
        Ok(cloud)
    }
}
