//! ONNX `TensorProto` to libtorch tensors (raw bytes, typed fields, external data files), and
//! small conversions of constant tensors to Rust vectors.

use super::proto::TensorProto;
use super::proto::tensor_proto::{DataLocation, DataType};
use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};
use tch::{Kind, Tensor};

/// Most bytes the initializers and constants of one model may declare in all: a file claiming
/// more is refused before anything is allocated (hostile or broken files; the largest models
/// served here hold a few hundred MB).
pub const MAX_WEIGHT_BYTES: u64 = 8 << 30;

/// Bytes of one element of `dt` on disk; `None` for types the importer does not read.
fn element_bytes(dt: DataType) -> Option<u64> {
    Some(match dt {
        DataType::Double | DataType::Int64 | DataType::Uint64 => 8,
        DataType::Float | DataType::Int32 | DataType::Uint32 => 4,
        DataType::Float16 | DataType::Bfloat16 | DataType::Int16 | DataType::Uint16 => 2,
        DataType::Int8 | DataType::Uint8 | DataType::Bool => 1,
        _ => return None,
    })
}

/// The bytes a tensor's dimensions and data type declare, checked: what it will take in memory
/// once decoded, known before reading any of its data.
///
/// # Errors
/// [`Error::Malformed`] for negative or overflowing dimensions and unknown data types.
pub(super) fn declared_bytes(t: &TensorProto) -> Result<u64> {
    let name = t.name.as_deref().unwrap_or("");
    let bad = |msg: String| Error::Malformed(format!("tensor '{name}': {msg}"));
    let code = t.data_type.unwrap_or(0);
    let dt = DataType::try_from(code).map_err(|_| bad(format!("unknown data type {code}")))?;
    let size = element_bytes(dt).ok_or_else(|| bad(format!("unsupported data type {dt:?}")))?;
    t.dims.iter().try_fold(size, |acc, &d| {
        let d = u64::try_from(d).map_err(|_| bad(format!("negative dimension in {:?}", t.dims)))?;
        acc.checked_mul(d).ok_or_else(|| bad(format!("dimensions {:?} overflow", t.dims)))
    })
}

/// Decodes a tensor. Integer types become `Int64` (except `uint8` and `bool`), 16-bit floats
/// become `Float`; `Float` and `Double` stay as they are. External data is read from files
/// relative to `base_dir`.
///
/// # Errors
/// [`Error::Malformed`] for inconsistent sizes, unknown or unsupported data types and external
/// data that cannot be located; [`Error::Io`] when an external file cannot be read.
pub(super) fn to_tensor(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor> {
    let name = t.name.as_deref().unwrap_or("");
    let bad = |msg: String| Error::Malformed(format!("tensor '{name}': {msg}"));
    let mut numel: usize = 1;
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        let du = usize::try_from(d).map_err(|_| bad(format!("negative dimension in {:?}", t.dims)))?;
        numel = numel.checked_mul(du).ok_or_else(|| bad(format!("dimensions {:?} overflow", t.dims)))?;
        dims.push(d);
    }
    let code = t.data_type.unwrap_or(0);
    let dt = DataType::try_from(code).map_err(|_| bad(format!("unknown data type {code}")))?;
    let declared = declared_bytes(t)?;
    if declared > MAX_WEIGHT_BYTES {
        return Err(bad(format!("its dimensions {:?} declare {declared} bytes, more than the budget of {MAX_WEIGHT_BYTES}", t.dims)));
    }
    let flat = if t.data_location() == DataLocation::External {
        let bytes = read_external(t, base_dir, declared).map_err(|e| match e {
            Error::Malformed(m) => bad(m),
            e => e,
        })?;
        from_raw(&bytes, dt, numel).map_err(bad)?
    } else if let Some(raw) = &t.raw_data {
        from_raw(raw, dt, numel).map_err(bad)?
    } else {
        from_typed(t, dt, numel).map_err(bad)?
    };
    flat.f_reshape(dims.as_slice()).map_err(|e| bad(e.to_string()))
}

fn check_len(have: usize, numel: usize, what: &str) -> Result<(), String> {
    if have == numel { Ok(()) } else { Err(format!("{what} holds {have} elements, the dimensions say {numel}")) }
}

fn from_raw(raw: &[u8], dt: DataType, numel: usize) -> Result<Tensor, String> {
    let (kind, size) = match dt {
        DataType::Float => (Kind::Float, 4),
        DataType::Double => (Kind::Double, 8),
        DataType::Float16 => (Kind::Half, 2),
        DataType::Bfloat16 => (Kind::BFloat16, 2),
        DataType::Int8 => (Kind::Int8, 1),
        DataType::Int16 => (Kind::Int16, 2),
        DataType::Int32 => (Kind::Int, 4),
        DataType::Int64 => (Kind::Int64, 8),
        DataType::Uint8 | DataType::Bool => (Kind::Uint8, 1),
        DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
            let size = match dt {
                DataType::Uint16 => 2,
                DataType::Uint32 => 4,
                _ => 8,
            };
            check_len(raw.len() / size, numel, "raw_data")?;
            if !raw.len().is_multiple_of(size) {
                return Err(format!("raw_data has {} bytes, not a multiple of {size}", raw.len()));
            }
            let v: Vec<i64> = raw
                .chunks_exact(size)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..size].copy_from_slice(c);
                    u64::from_le_bytes(b) as i64
                })
                .collect();
            return Ok(Tensor::from_slice(&v));
        }
        other => return Err(format!("data type {} is not supported", other.as_str_name())),
    };
    if raw.len() != numel * size {
        return Err(format!("raw_data has {} bytes, the dimensions need {} ({} x {size})", raw.len(), numel * size, numel));
    }
    let n = numel as i64;
    // `from_data_size` copies exactly n * size bytes, which the check above guarantees exist.
    let t = Tensor::f_from_data_size(raw, &[n], kind).map_err(|e| e.to_string())?;
    normalise(t, dt).map_err(|e| e.to_string())
}

/// Brings a freshly decoded tensor to the kinds the importer works with.
fn normalise(t: Tensor, dt: DataType) -> Result<Tensor, tch::TchError> {
    match dt {
        DataType::Float16 | DataType::Bfloat16 => t.f_to_kind(Kind::Float),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => t.f_to_kind(Kind::Int64),
        DataType::Bool => t.f_ne(0),
        _ => Ok(t),
    }
}

fn from_typed(t: &TensorProto, dt: DataType, numel: usize) -> Result<Tensor, String> {
    let out = match dt {
        DataType::Float => {
            check_len(t.float_data.len(), numel, "float_data")?;
            Tensor::from_slice(&t.float_data)
        }
        DataType::Double => {
            check_len(t.double_data.len(), numel, "double_data")?;
            Tensor::from_slice(&t.double_data)
        }
        DataType::Int64 => {
            check_len(t.int64_data.len(), numel, "int64_data")?;
            Tensor::from_slice(&t.int64_data)
        }
        DataType::Uint32 | DataType::Uint64 => {
            check_len(t.uint64_data.len(), numel, "uint64_data")?;
            let v: Vec<i64> = t.uint64_data.iter().map(|&x| x as i64).collect();
            Tensor::from_slice(&v)
        }
        DataType::Int32 | DataType::Int16 | DataType::Int8 | DataType::Uint16 | DataType::Uint8 | DataType::Bool => {
            check_len(t.int32_data.len(), numel, "int32_data")?;
            match dt {
                DataType::Uint8 => Tensor::from_slice(&t.int32_data.iter().map(|&x| x as u8).collect::<Vec<u8>>()),
                DataType::Bool => Tensor::from_slice(&t.int32_data.iter().map(|&x| x != 0).collect::<Vec<bool>>()),
                _ => Tensor::from_slice(&t.int32_data.iter().map(|&x| i64::from(x)).collect::<Vec<i64>>()),
            }
        }
        DataType::Float16 | DataType::Bfloat16 => {
            check_len(t.int32_data.len(), numel, "int32_data")?;
            let bits: Vec<i16> = t.int32_data.iter().map(|&x| x as u16 as i16).collect();
            let kind = if dt == DataType::Float16 { Kind::Half } else { Kind::BFloat16 };
            Tensor::from_slice(&bits).f_view_dtype(kind).and_then(|x| x.f_to_kind(Kind::Float)).map_err(|e| e.to_string())?
        }
        other => return Err(format!("data type {} is not supported", other.as_str_name())),
    };
    Ok(out)
}

/// Reads the bytes of an externally stored tensor (`location`, `offset`, `length`).
/// Reads a tensor's external data: a file below `base_dir` (after resolving symbolic links), and
/// exactly the `declared` bytes its dimensions need, checked before anything is read.
fn read_external(t: &TensorProto, base_dir: Option<&Path>, declared: u64) -> Result<Vec<u8>> {
    let mut location = None;
    let (mut offset, mut length) = (0u64, None);
    for e in &t.external_data {
        let value = e.value.as_deref().unwrap_or("");
        let num = || value.parse::<u64>().map_err(|_| Error::Malformed(format!("external data entry '{value}' is not a number")));
        match e.key.as_deref().unwrap_or("") {
            "location" => location = Some(value),
            "offset" => offset = num()?,
            "length" => length = Some(num()?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| Error::Malformed("external data without a location".into()))?;
    let rel = Path::new(location);
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(Error::Malformed(format!("external data location '{location}' must be a relative path below the model")));
    }
    let base = base_dir.ok_or_else(|| Error::Malformed(format!("external data '{location}' but no model directory is known")))?;
    let path = base.join(rel);
    let io = |source| Error::Io { path: path.clone(), source };
    // A symbolic link below the model's folder may point anywhere: the file read must be inside.
    let real = path.canonicalize().map_err(io)?;
    let real_base = base.canonicalize().map_err(|source| Error::Io { path: base.to_path_buf(), source })?;
    if !real.starts_with(&real_base) {
        return Err(Error::Malformed(format!(
            "external data location '{location}' resolves to {}, outside the model's folder {}",
            real.display(),
            real_base.display()
        )));
    }
    let mut file = std::fs::File::open(&real).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    // Without a length, the tensor's own bytes from the offset (not the rest of the file).
    let length = length.unwrap_or(declared);
    if length != declared {
        return Err(Error::Malformed(format!(
            "external data '{location}' holds {length} bytes, the dimensions and data type need {declared}"
        )));
    }
    if offset.checked_add(length).is_none_or(|end| end > file_len) {
        return Err(Error::Malformed(format!("external data {offset}+{length} lies beyond the end of '{location}' ({file_len} bytes)")));
    }
    let len = usize::try_from(length).map_err(|_| Error::Malformed(format!("external data length {length} too large")))?;
    let mut buf = vec![0u8; len];
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    file.read_exact(&mut buf).map_err(io)?;
    Ok(buf)
}

/// A constant's elements as `i64` (truncating floats).
pub(super) fn ints(t: &Tensor) -> Result<Vec<i64>, tch::TchError> {
    let flat = t.f_to_kind(Kind::Int64)?.f_contiguous()?.f_view([-1])?;
    Vec::<i64>::try_from(&flat)
}

/// A constant's elements as `f32`.
pub(super) fn floats(t: &Tensor) -> Result<Vec<f32>, tch::TchError> {
    let flat = t.f_to_kind(Kind::Float)?.f_contiguous()?.f_view([-1])?;
    Vec::<f32>::try_from(&flat)
}

/// A tensor's shape as sizes.
pub(super) fn dims(t: &Tensor) -> Vec<usize> {
    t.size().iter().map(|&d| d as usize).collect()
}

/// The kind of an ONNX data type code (`to` of Cast, graph input element types).
pub(super) fn kind_of(code: i64) -> Option<Kind> {
    let dt = DataType::try_from(i32::try_from(code).ok()?).ok()?;
    Some(match dt {
        DataType::Float | DataType::Float16 | DataType::Bfloat16 => Kind::Float,
        DataType::Double => Kind::Double,
        DataType::Uint8 => Kind::Uint8,
        DataType::Bool => Kind::Bool,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Kind::Int64,
        DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => Kind::Int64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::StringStringEntryProto;
    use crate::onnx::testutil::*;
    use crate::onnx::{ImportOptions, import_file};

    fn proto(dt: DataType, dims: &[i64]) -> TensorProto {
        TensorProto { name: Some("t".into()), data_type: Some(dt as i32), dims: dims.to_vec(), ..Default::default() }
    }

    #[test]
    fn typed_fields_decode() -> Result<()> {
        let mut f = proto(DataType::Float, &[2, 2]);
        f.float_data = vec![1.0, -2.0, 3.5, 4.0];
        let t = to_tensor(&f, None)?;
        assert_eq!(t.size(), vec![2, 2]);
        assert_eq!(floats(&t).map_err(Error::torch("read"))?, vec![1.0, -2.0, 3.5, 4.0]);

        let mut i = proto(DataType::Int64, &[3]);
        i.int64_data = vec![7, -1, 1 << 40];
        assert_eq!(ints(&to_tensor(&i, None)?).map_err(Error::torch("read"))?, vec![7, -1, 1 << 40]);

        let mut i32s = proto(DataType::Int32, &[2]);
        i32s.int32_data = vec![-5, 9];
        let t = to_tensor(&i32s, None)?;
        assert_eq!(t.kind(), Kind::Int64);
        assert_eq!(ints(&t).map_err(Error::torch("read"))?, vec![-5, 9]);

        let mut d = proto(DataType::Double, &[]);
        d.double_data = vec![0.25];
        let t = to_tensor(&d, None)?;
        assert_eq!(t.size(), Vec::<i64>::new());
        assert_eq!(floats(&t).map_err(Error::torch("read"))?, vec![0.25]);

        let mut h = proto(DataType::Float16, &[2]);
        h.int32_data = vec![0x3c00, 0xc000]; // 1.0, -2.0
        assert_eq!(floats(&to_tensor(&h, None)?).map_err(Error::torch("read"))?, vec![1.0, -2.0]);

        let mut raw = proto(DataType::Int32, &[2]);
        raw.raw_data = Some([3i32.to_le_bytes(), (-4i32).to_le_bytes()].concat());
        assert_eq!(ints(&to_tensor(&raw, None)?).map_err(Error::torch("read"))?, vec![3, -4]);
        Ok(())
    }

    #[test]
    fn inconsistent_sizes_are_malformed() {
        let mut f = proto(DataType::Float, &[3]);
        f.float_data = vec![1.0, 2.0];
        assert!(matches!(to_tensor(&f, None), Err(Error::Malformed(_))));
        let mut r = proto(DataType::Float, &[1 << 40, 1 << 40]);
        r.raw_data = Some(vec![0; 8]);
        assert!(matches!(to_tensor(&r, None), Err(Error::Malformed(_))));
        let mut n = proto(DataType::Float, &[-1]);
        n.float_data = vec![1.0];
        assert!(matches!(to_tensor(&n, None), Err(Error::Malformed(_))));
    }

    #[test]
    fn external_data_is_read_next_to_the_model() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("lop_onnx_ext_{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
        // Weight of a 1x1 conv 2 -> 3 channels, stored after 16 bytes of padding.
        let w: Vec<f32> = vec![0.5, -1.0, 2.0, 0.25, -0.75, 1.5];
        let mut bytes = vec![0u8; 16];
        bytes.extend(w.iter().flat_map(|x| x.to_le_bytes()));
        std::fs::write(dir.join("weights.data"), &bytes).map_err(|source| Error::Io { path: dir.clone(), source })?;
        let mut wt = proto(DataType::Float, &[3, 2, 1, 1]);
        wt.name = Some("w".into());
        wt.data_location = Some(DataLocation::External as i32);
        let kv = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
        wt.external_data = vec![kv("location", "weights.data"), kv("offset", "16"), kv("length", "24")];
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 3, 3]);
        m.init(wt);
        m.node("Conv", &["x", "w"], &["y"], vec![]);
        m.output("y");
        let path = dir.join("model.onnx");
        std::fs::write(&path, m.bytes()).map_err(|source| Error::Io { path: path.clone(), source })?;
        let g = import_file(&path, &ImportOptions::default())?;
        let x = Tensor::randn([1, 2, 3, 3], (Kind::Float, tch::Device::Cpu));
        let y = crate::exec::run_whole(&g, &[x.shallow_clone()])?.outputs.remove(0);
        let wt = Tensor::from_slice(&w).view([3, 2, 1, 1]);
        let want = x.conv2d(&wt, None::<&Tensor>, [1, 1], [0, 0], [1, 1], 1);
        assert_eq!(max_diff(&y, &want), 0.0);

        // A length running past the end of the file is malformed, not a panic.
        let mut m2 = ModelBuilder::new(13);
        m2.input("x", &[1, 2, 3, 3]);
        let mut wt2 = proto(DataType::Float, &[3, 2, 1, 1]);
        wt2.name = Some("w".into());
        wt2.data_location = Some(DataLocation::External as i32);
        wt2.external_data = vec![kv("location", "weights.data"), kv("offset", "32"), kv("length", "24")];
        m2.init(wt2);
        m2.node("Conv", &["x", "w"], &["y"], vec![]);
        m2.output("y");
        let err = crate::onnx::import_bytes(&m2.bytes(), "m2", Some(&dir), &ImportOptions::default());
        assert!(matches!(err, Err(Error::Malformed(_))), "{err:?}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    /// Files built to hurt: each is refused at load time with a clear error, before the data it
    /// announces is allocated or read, and nothing outside the model's folder is opened.
    #[test]
    fn hostile_model_files_are_refused_before_anything_is_allocated() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("lop_onnx_hostile_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let model_dir = dir.join("model");
        std::fs::create_dir_all(&model_dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
        let kv = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
        let conv = |w: TensorProto| {
            let mut m = ModelBuilder::new(13);
            m.input("x", &[1, 2, 3, 3]);
            m.init(w);
            m.node("Conv", &["x", "w"], &["y"], vec![]);
            m.output("y");
            m
        };
        let external = |location: &str, extra: Vec<StringStringEntryProto>| {
            let mut w = proto(DataType::Float, &[3, 2, 1, 1]);
            w.name = Some("w".into());
            w.data_location = Some(DataLocation::External as i32);
            w.external_data = [vec![kv("location", location)], extra].concat();
            w
        };
        let load = |m: &ModelBuilder| crate::onnx::import_bytes(&m.bytes(), "hostile", Some(&model_dir), &ImportOptions::default());
        let msg = |r: Result<crate::graph::Graph>| match r {
            Ok(_) => panic!("a hostile model loaded"),
            Err(e) => e.to_string(),
        };
        // A symbolic link in the model's folder that points outside it.
        let outside = dir.join("secret.data");
        std::fs::write(&outside, vec![0u8; 24]).map_err(|source| Error::Io { path: outside.clone(), source })?;
        std::os::unix::fs::symlink(&outside, model_dir.join("link.data")).map_err(|source| Error::Io { path: dir.clone(), source })?;
        let e = msg(load(&conv(external("link.data", vec![]))));
        assert!(e.contains("outside the model's folder"), "{e}");
        // A length other than the dimensions need (here a 1 GiB sparse file) is refused
        // before reading; so is a path that climbs out.
        let sparse = model_dir.join("huge.data");
        let f = std::fs::File::create(&sparse).map_err(|source| Error::Io { path: sparse.clone(), source })?;
        f.set_len(1 << 30).map_err(|source| Error::Io { path: sparse.clone(), source })?;
        let e = msg(load(&conv(external("huge.data", vec![kv("length", &(1u64 << 30).to_string())]))));
        assert!(e.contains("need 24"), "{e}");
        let e = msg(load(&conv(external("../secret.data", vec![]))));
        assert!(e.contains("relative path below the model"), "{e}");
        // Absurd dimensions: 4 TiB declared by one initializer, 8 GiB and more by the first two
        // of three 4 GiB ones.
        let mut huge = proto(DataType::Float, &[1 << 20, 1 << 20]);
        huge.name = Some("w".into());
        huge.raw_data = Some(vec![0; 8]);
        let e = msg(load(&conv(huge)));
        assert!(e.contains("budget"), "{e}");
        let mut m = conv(tf32("w", &[3, 2, 1, 1], &[0.0; 6]));
        for k in 0..3 {
            let mut t = proto(DataType::Float, &[1 << 30]);
            t.name = Some(format!("unused{k}"));
            t.raw_data = Some(vec![0; 4]);
            m.init(t);
        }
        let e = msg(load(&m));
        assert!(e.contains("unused1") && e.contains("budget"), "the first initializer past the budget is named: {e}");
        // An input of absurd size, and a graph whose nodes feed each other in a cycle.
        let mut big = ModelBuilder::new(13);
        big.input("x", &[1, 3, 1 << 20, 1 << 20]);
        big.node("Relu", &["x"], &["y"], vec![]);
        big.output("y");
        let e = msg(load(&big));
        assert!(e.contains("too large"), "{e}");
        let mut cycle = ModelBuilder::new(13);
        cycle.input("x", &[1, 2, 3, 3]);
        cycle.node("Add", &["x", "b"], &["a"], vec![]);
        cycle.node("Relu", &["a"], &["b"], vec![]);
        cycle.output("b");
        let e = msg(load(&cycle));
        assert!(e.contains("'b'"), "the error names the value used before it is produced: {e}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
