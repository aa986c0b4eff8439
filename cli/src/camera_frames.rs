//! Camera JPEGs as a camera driver writes them, and reading them back as they are: `lop
//! camera-jpegs` writes the project's photographs as a camera's 4:2:0 JPEGs, and `lop bench
//! --frame-codec passthrough --frames DIR` sends such files unchanged (issue 59).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use lop::codec::photo::{Format, dimensions};
use lop::codec::{FrameCodec, Image};

/// Arguments of `lop camera-jpegs`.
#[derive(Debug, clap::Args)]
pub struct CameraJpegsArgs {
    /// A photograph (PNG or JPEG) or a folder of them (`scripts/photos.sh` prints one).
    #[arg(long)]
    pub frames: PathBuf,
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
    let frames = crate::frames::load(&args.frames, &image)?;
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

/// One camera frame: the file's name, its JPEG bytes as they are, and their decoding (planar,
/// by the decoder both sides use), which is the model's input.
pub struct CameraFrame {
    /// The file's name.
    pub name: String,
    /// The JPEG, unchanged.
    pub jpeg: Arc<[u8]>,
    /// Its decoding, planar `[C, H, W]`.
    pub planar: Vec<u8>,
}

/// Reads the camera JPEGs at `path` (a file or a folder's `.jpg`/`.jpeg` files, by name), each
/// of exactly `image`'s size: the model takes camera frames as they are.
///
/// # Errors
/// A file that is not a JPEG, or of another size (both sizes named, with the fit to use), or
/// that does not decode.
pub fn load_camera(path: &Path, image: &Image) -> anyhow::Result<Vec<CameraFrame>> {
    let files = crate::frames::picture_files(path)?;
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let name = f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
            anyhow::ensure!(
                Format::sniff(&bytes) == Some(Format::Jpeg),
                "{name} is not a JPEG: --frame-codec passthrough sends camera JPEGs as they are (lop camera-jpegs writes some)"
            );
            let (w, h) = dimensions(&bytes).with_context(|| format!("reading {name}'s headers"))?;
            anyhow::ensure!(
                (w, h) == (image.width, image.height),
                "{name} is {w}x{h}, but the model takes {}x{} camera frames: load it with --camera-fit letterbox@{w}x{h} (or resize@{w}x{h})",
                image.width,
                image.height
            );
            let planar = lop::codec::decode(FrameCodec::Passthrough, image, &bytes, image.height)
                .with_context(|| format!("decoding {name}"))?;
            Ok(CameraFrame { name, jpeg: Arc::from(bytes), planar })
        })
        .collect()
}
