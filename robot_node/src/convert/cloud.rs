//! Point clouds (`sensor_msgs/PointCloud2`) to bird's-eye-view and voxel grids (CHW `f32`).
//!
//! Fields are found by name at any offset: `x`, `y`, `z` are required and must be `FLOAT32` or
//! `FLOAT64`; `intensity` is optional and may be any numeric type. Either byte order is read
//! (`is_bigendian`). Points whose x, y or z is NaN or infinite are skipped and counted; a
//! non-finite intensity counts as 0. Points outside the grid's ranges are counted as out of range.
//!
//! ## Cells
//! Ranges are half-open, `[min, max)`. Grid row `r` holds `x` in `[x_min + r dx, x_min + (r+1) dx)`
//! with `dx = (x_max - x_min) / rows` (row 0 is the nearest `x`, i.e. the back edge of the grid),
//! column `c` holds `y` in `[y_min + c dy, ...)` likewise. The output is CHW, row-major.
//!
//! ## BEV channels (fixed order; disabled ones are left out, the rest keep their order)
//! 0. occupancy: 1 if any point falls in the cell, else 0.
//! 1. max height: `(max z - z_min) / (z_max - z_min)` over the cell's points, in [0, 1); 0 if empty.
//! 2. mean intensity: the mean raw intensity of the cell's points (0 if empty or no field).
//! 3. density: `min(1, ln(1 + n) / ln(64))` for `n` points (Complex-YOLO's normalisation).
//!
//! ## Voxels
//! Occupancy (1 or 0) with one channel per z bin: channel `k` holds `z` in
//! `[z_min + k dz, z_min + (k+1) dz)`, `dz = (z_max - z_min) / depth`.

use super::{ConvertError, MAX_OUTPUT_ELEMENTS};

/// `PointField` datatype codes.
pub mod datatype {
    /// i8.
    pub const INT8: u8 = 1;
    /// u8.
    pub const UINT8: u8 = 2;
    /// i16.
    pub const INT16: u8 = 3;
    /// u16.
    pub const UINT16: u8 = 4;
    /// i32.
    pub const INT32: u8 = 5;
    /// u32.
    pub const UINT32: u8 = 6;
    /// f32.
    pub const FLOAT32: u8 = 7;
    /// f64.
    pub const FLOAT64: u8 = 8;
}

/// The fields of a `sensor_msgs/PointField`.
#[derive(Debug, Clone, Copy)]
pub struct PointFieldView<'a> {
    /// Field name (`x`, `y`, `z`, `intensity`, ...).
    pub name: &'a str,
    /// Byte offset inside a point.
    pub offset: u32,
    /// A [`datatype`] code.
    pub datatype: u8,
    /// Elements (only the first is read).
    pub count: u32,
}

/// The fields of a `sensor_msgs/PointCloud2`.
#[derive(Debug, Clone, Copy)]
pub struct CloudView<'a> {
    /// The point layout.
    pub fields: &'a [PointFieldView<'a>],
    /// Byte order of every field.
    pub is_bigendian: bool,
    /// Bytes per point.
    pub point_step: u32,
    /// Bytes per row, at least `width * point_step`.
    pub row_step: u32,
    /// Points per row.
    pub width: u32,
    /// Rows (1 for an unorganised cloud).
    pub height: u32,
    /// At least `row_step * height` bytes.
    pub data: &'a [u8],
}

/// Which BEV channels to produce (see the module docs for their fixed order and meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BevChannels {
    /// Channel 0: occupancy.
    pub occupancy: bool,
    /// Channel 1: normalised max height.
    pub max_height: bool,
    /// Channel 2: mean intensity.
    pub mean_intensity: bool,
    /// Channel 3: density.
    pub density: bool,
}

impl BevChannels {
    /// All four channels.
    pub const ALL: BevChannels = BevChannels { occupancy: true, max_height: true, mean_intensity: true, density: true };
    /// How many channels are produced.
    pub fn count(&self) -> usize {
        [self.occupancy, self.max_height, self.mean_intensity, self.density].iter().filter(|b| **b).count()
    }
}

/// A bird's-eye-view grid.
#[derive(Debug, Clone, PartialEq)]
pub struct BevGrid {
    /// `[min, max)` metres along x (rows).
    pub x_range: (f32, f32),
    /// `[min, max)` metres along y (columns).
    pub y_range: (f32, f32),
    /// `[min, max)` metres along z (points outside are out of range).
    pub z_range: (f32, f32),
    /// Cells along x.
    pub rows: u32,
    /// Cells along y.
    pub cols: u32,
    /// The channels produced.
    pub channels: BevChannels,
}

/// An occupancy voxel grid, z bins as channels.
#[derive(Debug, Clone, PartialEq)]
pub struct VoxelGrid {
    /// `[min, max)` metres along x (rows).
    pub x_range: (f32, f32),
    /// `[min, max)` metres along y (columns).
    pub y_range: (f32, f32),
    /// `[min, max)` metres along z (channels).
    pub z_range: (f32, f32),
    /// Cells along x.
    pub rows: u32,
    /// Cells along y.
    pub cols: u32,
    /// Bins along z (output channels).
    pub depth: u32,
}

/// What happened to a cloud's points.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloudStats {
    /// Points in the message (`width * height`).
    pub points: u64,
    /// Points that landed in a cell.
    pub used: u64,
    /// Points skipped for a NaN or infinite x, y or z.
    pub nonfinite: u64,
    /// Finite points outside the grid's ranges.
    pub out_of_range: u64,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    offset: usize,
    datatype: u8,
}

fn size_of(dt: u8) -> Option<u32> {
    Some(match dt {
        1 | 2 => 1,
        3 | 4 => 2,
        5..=7 => 4,
        8 => 8,
        _ => return None,
    })
}

/// Reads a field of a point. `p` is exactly one point's bytes, and the layout was checked to
/// fit; a short slice would read NaN rather than panic.
#[inline]
fn read(p: &[u8], f: Field, be: bool) -> f64 {
    macro_rules! get {
        ($t:ty, $n:expr) => {{
            match p.get(f.offset..f.offset + $n).and_then(|s| <[u8; $n]>::try_from(s).ok()) {
                Some(b) => (if be { <$t>::from_be_bytes(b) } else { <$t>::from_le_bytes(b) }) as f64,
                None => f64::NAN,
            }
        }};
    }
    match f.datatype {
        1 => get!(i8, 1),
        2 => get!(u8, 1),
        3 => get!(i16, 2),
        4 => get!(u16, 2),
        5 => get!(i32, 4),
        6 => get!(u32, 4),
        7 => get!(f32, 4),
        8 => get!(f64, 8),
        _ => f64::NAN,
    }
}

struct Layout {
    x: Field,
    y: Field,
    z: Field,
    intensity: Option<Field>,
}

fn field(c: &CloudView, name: &str, float_only: bool) -> Result<Option<Field>, ConvertError> {
    let Some(f) = c.fields.iter().find(|f| f.name == name) else {
        return Ok(None);
    };
    let unsupported = || ConvertError::UnsupportedField { name: name.to_string(), datatype: f.datatype };
    let size = size_of(f.datatype).ok_or_else(unsupported)?;
    if float_only && f.datatype != datatype::FLOAT32 && f.datatype != datatype::FLOAT64 {
        return Err(unsupported());
    }
    if f.count == 0 || u64::from(f.offset) + u64::from(size) > u64::from(c.point_step) {
        return Err(ConvertError::FieldOutsidePoint { name: name.to_string(), offset: f.offset, size, point_step: c.point_step });
    }
    Ok(Some(Field { offset: f.offset as usize, datatype: f.datatype }))
}

fn layout(c: &CloudView) -> Result<Layout, ConvertError> {
    let points = u64::from(c.width) * u64::from(c.height);
    if points == 0 {
        return Err(ConvertError::ZeroSize { what: format!("point cloud {}x{} has no points", c.width, c.height) });
    }
    let need =
        |n: &str| -> Result<Field, ConvertError> { field(c, n, true)?.ok_or_else(|| ConvertError::MissingField { name: n.to_string() }) };
    let l = Layout { x: need("x")?, y: need("y")?, z: need("z")?, intensity: field(c, "intensity", false)? };
    let row = u64::from(c.width) * u64::from(c.point_step);
    if u64::from(c.row_step) < row {
        return Err(ConvertError::RowStepTooSmall { row_step: u64::from(c.row_step), need: row });
    }
    let need = u64::from(c.row_step) * u64::from(c.height);
    if (c.data.len() as u64) < need {
        return Err(ConvertError::DataTooShort { len: c.data.len() as u64, need });
    }
    Ok(l)
}

/// Cell indexing along one axis.
#[derive(Clone, Copy)]
struct Axis {
    min: f64,
    max: f64,
    per_unit: f64,
    n: usize,
}

impl Axis {
    fn new(what: &str, (min, max): (f32, f32), n: u32) -> Result<Axis, ConvertError> {
        if !(min.is_finite() && max.is_finite() && min < max) {
            return Err(ConvertError::BadTarget { msg: format!("{what} range [{min}, {max}) must be finite and non-empty") });
        }
        if n == 0 {
            return Err(ConvertError::ZeroSize { what: format!("{what} cells") });
        }
        let (min, max) = (f64::from(min), f64::from(max));
        Ok(Axis { min, max, per_unit: f64::from(n) / (max - min), n: n as usize })
    }
    #[inline]
    fn index(&self, v: f64) -> Option<usize> {
        if v < self.min || v >= self.max {
            return None;
        }
        Some((((v - self.min) * self.per_unit) as usize).min(self.n - 1))
    }
}

fn check_size(dims: &[usize]) -> Result<usize, ConvertError> {
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64)).unwrap_or(u64::MAX);
    if n > MAX_OUTPUT_ELEMENTS {
        return Err(ConvertError::BadTarget { msg: format!("grid {dims:?} is too large") });
    }
    Ok(n as usize)
}

/// Calls `f(x, y, z, intensity)` for every finite point (intensity 0 when not finite, clamped to
/// f32's range); returns the count of non-finite points.
fn for_each_point(c: &CloudView, l: &Layout, mut f: impl FnMut(f64, f64, f64, f64)) -> u64 {
    let (ps, rs, be) = (c.point_step as usize, c.row_step as usize, c.is_bigendian);
    let mut nonfinite = 0;
    for r in 0..c.height as usize {
        for k in 0..c.width as usize {
            let off = r * rs + k * ps;
            let p = c.data.get(off..off + ps).unwrap_or(&[]);
            let (x, y, z) = (read(p, l.x, be), read(p, l.y, be), read(p, l.z, be));
            if !(x.is_finite() && y.is_finite() && z.is_finite()) {
                nonfinite += 1;
                continue;
            }
            // Clamped to f32's range, so that a cell's f64 sum stays finite and its mean fits the f32 grid.
            let i = l.intensity.map_or(0.0, |fi| read(p, fi, be));
            let max = f64::from(f32::MAX);
            f(x, y, z, if i.is_finite() { i.clamp(-max, max) } else { 0.0 });
        }
    }
    nonfinite
}

/// A BEV grid (CHW `f32`, `g.channels.count() x rows x cols`).
///
/// # Errors
/// See [`cloud_to_bev_with_stats`].
pub fn cloud_to_bev(c: &CloudView, g: &BevGrid) -> Result<Vec<f32>, ConvertError> {
    cloud_to_bev_with_stats(c, g).map(|(v, _)| v)
}

/// A BEV grid and what happened to the points.
///
/// # Errors
/// [`ConvertError::ZeroSize`] (no points, zero cells or channels), [`ConvertError::MissingField`]
/// (x, y or z), [`ConvertError::UnsupportedField`], [`ConvertError::FieldOutsidePoint`],
/// [`ConvertError::RowStepTooSmall`], [`ConvertError::DataTooShort`], [`ConvertError::BadTarget`]
/// (bad ranges, absurd size).
pub fn cloud_to_bev_with_stats(c: &CloudView, g: &BevGrid) -> Result<(Vec<f32>, CloudStats), ConvertError> {
    let (ax, ay, az) = (Axis::new("x", g.x_range, g.rows)?, Axis::new("y", g.y_range, g.cols)?, Axis::new("z", g.z_range, 1)?);
    let nc = g.channels.count();
    if nc == 0 {
        return Err(ConvertError::ZeroSize { what: "BEV channels (none enabled)".into() });
    }
    let cells = check_size(&[nc, ax.n, ay.n])? / nc;
    let l = layout(c)?;
    let mut stats = CloudStats { points: u64::from(c.width) * u64::from(c.height), ..CloudStats::default() };
    let mut count = vec![0u32; cells];
    let mut max_z = vec![f64::NEG_INFINITY; cells];
    let mut sum_i = vec![0f64; cells];
    stats.nonfinite = for_each_point(c, &l, |x, y, z, i| match (ax.index(x), ay.index(y), az.index(z)) {
        (Some(r), Some(col), Some(_)) => {
            let k = r * ay.n + col;
            count[k] += 1;
            max_z[k] = max_z[k].max(z);
            sum_i[k] += i;
            stats.used += 1;
        }
        _ => stats.out_of_range += 1,
    });
    let mut out = Vec::with_capacity(cells * nc);
    let z_span = az.max - az.min;
    let ln64 = 64f64.ln();
    if g.channels.occupancy {
        out.extend(count.iter().map(|&n| if n > 0 { 1.0 } else { 0.0 }));
    }
    if g.channels.max_height {
        out.extend(count.iter().zip(&max_z).map(|(&n, &z)| if n > 0 { ((z - az.min) / z_span) as f32 } else { 0.0 }));
    }
    if g.channels.mean_intensity {
        out.extend(count.iter().zip(&sum_i).map(|(&n, &s)| if n > 0 { (s / f64::from(n)) as f32 } else { 0.0 }));
    }
    if g.channels.density {
        out.extend(count.iter().map(|&n| ((f64::from(n) + 1.0).ln() / ln64).min(1.0) as f32));
    }
    tracing::trace!(
        points = stats.points,
        used = stats.used,
        nonfinite = stats.nonfinite,
        out_of_range = stats.out_of_range,
        "cloud to BEV"
    );
    Ok((out, stats))
}

/// An occupancy voxel grid (CHW `f32`, `depth x rows x cols`, values 0 or 1).
///
/// # Errors
/// See [`cloud_to_voxels_with_stats`].
pub fn cloud_to_voxels(c: &CloudView, g: &VoxelGrid) -> Result<Vec<f32>, ConvertError> {
    cloud_to_voxels_with_stats(c, g).map(|(v, _)| v)
}

/// An occupancy voxel grid and what happened to the points.
///
/// # Errors
/// As [`cloud_to_bev_with_stats`].
pub fn cloud_to_voxels_with_stats(c: &CloudView, g: &VoxelGrid) -> Result<(Vec<f32>, CloudStats), ConvertError> {
    let (ax, ay, az) = (Axis::new("x", g.x_range, g.rows)?, Axis::new("y", g.y_range, g.cols)?, Axis::new("z", g.z_range, g.depth)?);
    let n = check_size(&[az.n, ax.n, ay.n])?;
    let l = layout(c)?;
    let mut stats = CloudStats { points: u64::from(c.width) * u64::from(c.height), ..CloudStats::default() };
    let mut out = vec![0f32; n];
    let plane = ax.n * ay.n;
    stats.nonfinite = for_each_point(c, &l, |x, y, z, _| match (ax.index(x), ay.index(y), az.index(z)) {
        (Some(r), Some(col), Some(d)) => {
            out[d * plane + r * ay.n + col] = 1.0;
            stats.used += 1;
        }
        _ => stats.out_of_range += 1,
    });
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::datatype::*;
    use super::*;

    /// Packs points: `fields` as (name, offset, datatype), one value per field per point.
    fn pack(fields: &[(&str, u32, u8)], point_step: u32, be: bool, points: &[Vec<f64>]) -> Vec<u8> {
        let mut data = vec![0xAAu8; point_step as usize * points.len()];
        for (k, p) in points.iter().enumerate() {
            for (&(_, off, dt), &v) in fields.iter().zip(p) {
                let at = k * point_step as usize + off as usize;
                let bytes: Vec<u8> = match (dt, be) {
                    (FLOAT32, false) => (v as f32).to_le_bytes().to_vec(),
                    (FLOAT32, true) => (v as f32).to_be_bytes().to_vec(),
                    (FLOAT64, false) => v.to_le_bytes().to_vec(),
                    (FLOAT64, true) => v.to_be_bytes().to_vec(),
                    (UINT16, false) => (v as u16).to_le_bytes().to_vec(),
                    (UINT16, true) => (v as u16).to_be_bytes().to_vec(),
                    (UINT8, _) => vec![v as u8],
                    _ => panic!("test packs only f32, f64, u16, u8"),
                };
                data[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        data
    }
    fn views<'a>(fields: &'a [(&'a str, u32, u8)]) -> Vec<PointFieldView<'a>> {
        fields.iter().map(|&(name, offset, datatype)| PointFieldView { name, offset, datatype, count: 1 }).collect()
    }
    fn cloud<'a>(f: &'a [PointFieldView<'a>], be: bool, point_step: u32, n: u32, data: &'a [u8]) -> CloudView<'a> {
        CloudView { fields: f, is_bigendian: be, point_step, row_step: point_step * n, width: n, height: 1, data }
    }
    /// 4 x 4 cells of 1 m over x, y in [0, 4), z in [0, 2).
    const GRID: BevGrid =
        BevGrid { x_range: (0.0, 4.0), y_range: (0.0, 4.0), z_range: (0.0, 2.0), rows: 4, cols: 4, channels: BevChannels::ALL };

    fn pts() -> Vec<Vec<f64>> {
        vec![
            vec![0.5, 0.5, 1.0, 10.0],          // cell (0, 0)
            vec![0.6, 0.4, 1.5, 30.0],          // cell (0, 0) again
            vec![2.5, 3.5, 0.5, 7.0],           // cell (2, 3)
            vec![f64::NAN, 1.0, 1.0, 1.0],      // skipped
            vec![1.0, f64::INFINITY, 1.0, 1.0], // skipped
            vec![9.0, 1.0, 1.0, 1.0],           // out of range (x)
            vec![1.0, 1.0, 2.0, 1.0],           // out of range (z = max, half-open)
        ]
    }

    fn check_bev(out: &[f32], stats: CloudStats) {
        assert_eq!(out.len(), 4 * 16);
        assert_eq!(stats, CloudStats { points: 7, used: 3, nonfinite: 2, out_of_range: 2 });
        let ch = |c: usize, r: usize, col: usize| out[c * 16 + r * 4 + col];
        assert_eq!((ch(0, 0, 0), ch(0, 2, 3), ch(0, 1, 1)), (1.0, 1.0, 0.0));
        assert_eq!(out[..16].iter().sum::<f32>(), 2.0, "two occupied cells");
        assert_eq!((ch(1, 0, 0), ch(1, 2, 3)), (0.75, 0.25));
        assert_eq!((ch(2, 0, 0), ch(2, 2, 3)), (20.0, 7.0));
        assert!((ch(3, 0, 0) - (3f32.ln() / 64f32.ln())).abs() < 1e-6);
        assert_eq!(ch(3, 1, 1), 0.0);
    }

    #[test]
    fn cloud_bev_both_endiannesses_f32_and_f64_odd_offsets() {
        // Layout A: f32 x y z at 0/4/8, u16 intensity at 12, 16-byte points.
        let fa = [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, UINT16)];
        // Layout B: f64 fields at odd offsets, intensity first, 37-byte points, y before x.
        let fb = [("intensity", 0, UINT8), ("y", 3, FLOAT64), ("x", 13, FLOAT64), ("z", 29, FLOAT64)];
        for be in [false, true] {
            let data = pack(&fa, 16, be, &pts());
            let v = views(&fa);
            let (out, stats) = cloud_to_bev_with_stats(&cloud(&v, be, 16, 7, &data), &GRID).expect("converts");
            check_bev(&out, stats);
            let reorder: Vec<Vec<f64>> = pts().into_iter().map(|p| vec![p[3], p[1], p[0], p[2]]).collect();
            let data = pack(&fb, 37, be, &reorder);
            let v = views(&fb);
            let (out, stats) = cloud_to_bev_with_stats(&cloud(&v, be, 37, 7, &data), &GRID).expect("converts");
            check_bev(&out, stats);
        }
    }

    #[test]
    fn cloud_bev_channel_subset_organised_cloud_and_voxels() {
        let f = [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32)];
        let data = pack(&f, 12, false, &[vec![0.5, 0.5, 0.1], vec![3.5, 0.5, 1.9], vec![1.5, 2.5, 1.0], vec![1.5, 2.5, 1.1]]);
        // As a 2x2 organised cloud with 4 padding bytes per row.
        let mut padded = data[..24].to_vec();
        padded.extend([0u8; 4]);
        padded.extend(&data[24..]);
        padded.extend([0u8; 4]);
        let v = views(&f);
        let c = CloudView { fields: &v, is_bigendian: false, point_step: 12, row_step: 28, width: 2, height: 2, data: &padded };
        let g = BevGrid { channels: BevChannels { occupancy: false, max_height: false, mean_intensity: true, density: true }, ..GRID };
        let out = cloud_to_bev(&c, &g).expect("converts");
        assert_eq!(out.len(), 2 * 16);
        assert_eq!(&out[..16], &[0.0; 16], "no intensity field: zeros");
        assert!((out[16 + 4 + 2] - (3f32.ln() / 64f32.ln())).abs() < 1e-6, "two points in cell (1, 2)");
        // Voxels: 2 z bins of 1 m.
        let vg = VoxelGrid { x_range: (0.0, 4.0), y_range: (0.0, 4.0), z_range: (0.0, 2.0), rows: 4, cols: 4, depth: 2 };
        let (vox, stats) = cloud_to_voxels_with_stats(&c, &vg).expect("converts");
        assert_eq!(stats, CloudStats { points: 4, used: 4, nonfinite: 0, out_of_range: 0 });
        let at = |d: usize, r: usize, col: usize| vox[d * 16 + r * 4 + col];
        assert_eq!((at(0, 0, 0), at(1, 3, 0), at(1, 1, 2), at(0, 1, 2)), (1.0, 1.0, 1.0, 0.0));
        assert_eq!(vox.iter().sum::<f32>(), 3.0);
    }

    #[test]
    fn cloud_bev_huge_intensities_stay_finite() {
        // f64 intensities beyond f32's range, and two whose f64 sum overflows: the mean channel
        // must stay finite (a model fed inf or NaN answers garbage).
        let f = [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, FLOAT64)];
        let pts = [vec![0.5, 0.5, 1.0, 1e300], vec![0.6, 0.4, 1.0, 1.7e308], vec![2.5, 2.5, 1.0, -1e40]];
        let data = pack(&f, 20, false, &pts);
        let v = views(&f);
        let g = BevGrid { channels: BevChannels { occupancy: false, max_height: false, mean_intensity: true, density: false }, ..GRID };
        let out = cloud_to_bev(&cloud(&v, false, 20, 3, &data), &g).expect("converts");
        assert!(out.iter().all(|v| v.is_finite()), "mean intensities {out:?}");
        assert_eq!((out[0], out[2 * 4 + 2]), (f32::MAX, -f32::MAX), "clamped to f32's range");
    }

    #[test]
    fn cloud_errors() {
        let f = [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32)];
        let data = pack(&f, 12, false, &[vec![0.5, 0.5, 0.5], vec![1.0, 1.0, 1.0]]);
        let v = views(&f);
        let ok = cloud(&v, false, 12, 2, &data);
        assert!(cloud_to_bev(&ok, &GRID).is_ok());
        let e = |c: &CloudView| cloud_to_bev(c, &GRID).expect_err("must fail").to_string();
        assert!(e(&CloudView { width: 0, ..ok }).contains("no points"));
        assert!(e(&CloudView { data: &data[..20], ..ok }).contains("20 bytes, the header implies 24"));
        assert!(e(&CloudView { point_step: 10, row_step: 20, ..ok }).contains("does not fit in point_step 10"));
        assert!(e(&CloudView { row_step: 20, ..ok }).contains("row_step 20"));
        let no_z = views(&f[..2]);
        assert!(e(&CloudView { fields: &no_z, ..ok }).contains("no 'z' field"));
        let int_x = views(&[("x", 0, INT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32)]);
        assert!(e(&CloudView { fields: &int_x, ..ok }).contains("'x' has unsupported datatype 5"));
        let bad_i = views(&[("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 0, 9)]);
        assert!(e(&CloudView { fields: &bad_i, ..ok }).contains("'intensity' has unsupported datatype 9"));
        let bad_grid = BevGrid { x_range: (1.0, 1.0), ..GRID };
        assert!(cloud_to_bev(&ok, &bad_grid).expect_err("empty range").to_string().contains("x range"));
        let no_ch =
            BevGrid { channels: BevChannels { occupancy: false, max_height: false, mean_intensity: false, density: false }, ..GRID };
        assert!(cloud_to_bev(&ok, &no_ch).is_err());
        let huge =
            VoxelGrid { x_range: (0.0, 1.0), y_range: (0.0, 1.0), z_range: (0.0, 1.0), rows: 1 << 12, cols: 1 << 12, depth: 1 << 12 };
        assert!(cloud_to_voxels(&ok, &huge).expect_err("too large").to_string().contains("too large"));
    }
}
