//! Camera JPEGs as a camera driver writes them, and reading them back as they are: `lop
//! camera-jpegs` writes the project's photographs as a camera's 4:2:0 JPEGs, and `lop bench
//! --frame-codec passthrough --frames DIR` sends such files unchanged (issue 59).

use std::path::{Path, PathBuf};

use anyhow::Context;
use lop::codec::Image;

pub use crate::frame_bytes::CameraFrame;
use crate::frame_bytes::camera_frame;

/// Arguments of `lop camera-jpegs`.
#[derive(Debug, clap::Args)]
pub struct CameraJpegsArgs {
    /// A photograph (PNG or JPEG) or a folder of them (`scripts/photos.sh` prints one), or a
    /// rosbag2 recording in MCAP storage (a `.mcap` file or the recording's folder).
    #[arg(long)]
    pub frames: PathBuf,
    /// The recording's image topic (sensor_msgs/msg/Image or CompressedImage); optional when
    /// it has one.
    #[arg(long)]
    pub frames_topic: Option<String>,
    /// The camera's frame size, WIDTHxHEIGHT: each photograph is scaled to cover it and
    /// cropped at the centre.
    #[arg(long, default_value = "640x480")]
    pub size: String,
    /// JPEG quality, 1-100.
    #[arg(long, default_value_t = 90)]
    pub quality: u8,
    /// The folder the JPEGs are written to (created).
    #[arg(long)]
    pub out: PathBuf,
}

/// Writes each photograph as a camera's JPEG: baseline, 4:2:0 chroma, at the quality asked, by
/// libjpeg-turbo (the encoder most camera drivers, Pillow and OpenCV use). Prints the folder.
///
/// # Errors
/// Bad options, unreadable photographs, an unwritable folder.
pub fn run_camera_jpegs(args: &CameraJpegsArgs) -> anyhow::Result<i32> {
    let (width, height) = crate::frames::parse_size(&args.size)?;
    anyhow::ensure!((1..=100).contains(&args.quality), "--quality {}: 1-100", args.quality);
    let image = Image { channels: 3, width, height };
    let frames = crate::frames::load(&args.frames, args.frames_topic.as_deref(), &image)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    for (name, planar) in &frames {
        let jpeg = lop::codec::jpeg::encode_as_a_camera_does(&image, planar, height, args.quality)?;
        let stem = Path::new(name).file_stem().map_or_else(|| name.clone(), |s| s.to_string_lossy().into_owned());
        let path = args.out.join(format!("{stem}.jpg"));
        std::fs::write(&path, &jpeg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("{}: {} bytes", path.display(), jpeg.len());
    }
    println!("{}", args.out.display());
    Ok(0)
}

/// Reads the camera JPEGs at `path` (a file or a folder's `.jpg`/`.jpeg` files, by name, or the
/// `CompressedImage` JPEGs of a rosbag2 recording's `topic`), each of exactly `image`'s size:
/// the model takes camera frames as they are.
///
/// # Errors
/// A file that is not a JPEG, or of another size (both sizes named, with the fit to use), or
/// that does not decode; a topic for files; the recording's errors.
pub fn load_camera(path: &Path, topic: Option<&str>, image: &Image) -> anyhow::Result<Vec<CameraFrame>> {
    if crate::bag::is_recording(path) {
        return crate::bag_frames::cameras(path, topic, image);
    }
    crate::bag_frames::no_topic(path, topic)?;
    let files = crate::frames::picture_files(path)?;
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let name = f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
            camera_frame(name, bytes, image)
        })
        .collect()
}
