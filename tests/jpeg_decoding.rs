//! libjpeg-turbo's decoding, bit for bit (issue 59): the project's photographs as camera JPEGs at
//! 4:4:4, 4:2:2 and 4:2:0 (and one progressive), decoded by lop against another build of
//! libjpeg-turbo (simplejpeg's, asked for the same merged upsampling: tests/jpeg/cases.py), with
//! SIMD against SIMD forced off (`JSIMD_FORCENONE=1`, in a child process: libjpeg-turbo picks its
//! SIMD once per process), JPEG bands against the whole frame, and the camera's JPEG cut at
//! restart markers, band by band as it streams, against its whole decoding.

use lop::codec::{self, FrameCodec, Image, photo};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One JPEG and the reference decoding of it.
struct Case {
    name: String,
    channels: usize,
    jpeg: Vec<u8>,
    reference: Vec<u8>,
}

/// Folder holding the cases: written by tests/jpeg/cases.py, or handed to a child process.
const CASES_ENV: &str = "LOP_JPEG_CASES";
/// Where a child process writes its digests.
const DIGESTS_ENV: &str = "LOP_JPEG_DIGESTS";

/// Writes the cases into a fresh folder named after `test` (the tests run in parallel).
fn write_cases(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lop-jpeg-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let python = tests::python_test_env().expect("the tests' Python peers");
    let script = tests::workspace_root().join("tests/jpeg/cases.py");
    let listing = tests::run_command("writing the JPEG cases with Pillow and simplejpeg", Command::new(python).arg(script).arg(&dir))
        .expect("cases.py");
    std::fs::write(dir.join("cases.txt"), listing).expect("listing");
    dir
}

fn read_cases(dir: &Path) -> Vec<Case> {
    let listing = std::fs::read_to_string(dir.join("cases.txt")).expect("listing");
    let cases: Vec<Case> = listing
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 4, "a case line: {line}");
            let read = |ext: &str| std::fs::read(dir.join(format!("{}.{ext}", f[0]))).expect("case file");
            Case { name: f[0].to_string(), channels: f[3].parse().expect("channels"), jpeg: read("jpg"), reference: read("pixels") }
        })
        .collect();
    // Six photographs at three chroma samplings, one of them also progressive, two as shipped,
    // one grey.
    assert_eq!(cases.len(), 22, "{listing}");
    let progressive = cases.iter().filter(|c| codec::turbo::header(&c.jpeg).expect("headers").progressive).count();
    assert_eq!(progressive, 1, "exactly the progressive case is progressive");
    cases
}

/// Digests of everything decoded or encoded here, per case: the whole picture, the 640x480
/// pictures as JPEG bands (the robot's encoding and the server's decoding), and the camera's
/// JPEG as it streams under passthrough (the rewrite's bytes and the bands' pixels).
fn digests(cases: &[Case]) -> Vec<String> {
    let mut out = Vec::new();
    for case in cases {
        let pic = photo::decode_picture(&case.jpeg).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        out.push(format!("{} whole {:016x}", case.name, codec::digest(&pic.pixels)));
        if (pic.width, pic.height) == (640, 480) && case.channels == 3 {
            let (encoded, decoded) = bands(&pic);
            out.push(format!("{} bands {:016x} {:016x}", case.name, codec::digest(&encoded), codec::digest(&decoded)));
        }
        if case.channels == 3 {
            let (rewritten, streamed) = camera_bands(case, &pic);
            out.push(format!("{} streamed {:016x} {:016x}", case.name, codec::digest(&rewritten), codec::digest(&streamed)));
        }
    }
    out
}

/// The 640x480 picture cut into JPEG bands on block rows as a plan cuts them, each coded as a
/// standalone JPEG and as the restart unit a robot sends: (every band's bytes in both codings,
/// the decoded bands stacked into a planar frame).
fn bands(pic: &photo::Picture) -> (Vec<u8>, Vec<u8>) {
    let image = Image { channels: 3, width: pic.width, height: pic.height };
    let planar = photo::fit(pic, &image);
    let q = FrameCodec::Jpeg { quality: 90 };
    let plane = image.width * image.height;
    let (mut bytes, mut frame) = (Vec::new(), vec![0u8; planar.len()]);
    for cut in [0, 64, 72, 200, 480].windows(2) {
        let (a, n) = (cut[0], cut[1] - cut[0]);
        let band: Vec<u8> =
            (0..3).flat_map(|c| planar[c * plane + a * image.width..c * plane + (a + n) * image.width].iter().copied()).collect();
        let data = codec::encode(q, &image, &band, n).expect("band encodes");
        let rows = codec::decode(q, &image, &data, n).expect("band decodes");
        // As a band crosses: its restart intervals without headers, the edge rebuilding them.
        let unit = codec::restart::RestartJpeg::encode(&image, &band, n, 90).expect("band encodes").unit(&(0..n)).expect("unit");
        let crossed = codec::restart::decode_unit(&image, &unit, n).expect("unit decodes");
        assert!(crossed == rows, "rows {a}..{}: the restart unit decodes to the band's pixels", a + n);
        bytes.extend_from_slice(&unit);
        for c in 0..3 {
            frame[c * plane + a * image.width..c * plane + (a + n) * image.width]
                .copy_from_slice(&rows[c * n * image.width..(c + 1) * n * image.width]);
        }
        bytes.extend_from_slice(&data);
    }
    let whole =
        codec::decode(q, &image, &codec::encode(q, &image, &planar, image.height).expect("encodes"), image.height).expect("decodes");
    assert!(whole == frame, "bands on block rows decode to the whole frame's pixels");
    (bytes, frame)
}

/// The camera's JPEG of `case` cut at restart markers into bands on the passthrough grid, each
/// decoded on its own as the server decodes it: (the rewritten JPEG, the bands' pixels
/// stacked), checked against the whole picture's decoding.
fn camera_bands(case: &Case, pic: &photo::Picture) -> (Vec<u8>, Vec<u8>) {
    let image = Image { channels: 3, width: pic.width, height: pic.height };
    let cut = codec::camera_scan::CameraScan::cut(&case.jpeg, &image).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let whole = codec::decode(FrameCodec::Passthrough, &image, &case.jpeg, image.height).expect("decodes");
    let grid = codec::camera_scan::GRID;
    let cuts: Vec<usize> = [0, grid, 5 * grid, 13 * grid].into_iter().filter(|&r| r < image.height).chain([image.height]).collect();
    let (plane, mut stacked, mut header) = (image.width * image.height, vec![0u8; whole.len()], Vec::new());
    for w in cuts.windows(2) {
        let (a, n) = (w[0], w[1] - w[0]);
        let unit = cut.unit(&(a..a + n), a == 0).expect("unit");
        let (carried, scan) = codec::camera_scan::split_unit(&unit).expect("splits");
        if let Some(h) = carried {
            header = h.to_vec();
        }
        let rows = codec::camera_scan::decode_scan(&image, &header, scan, n).unwrap_or_else(|e| panic!("{} rows {a}: {e}", case.name));
        for c in 0..3 {
            stacked[c * plane + a * image.width..c * plane + (a + n) * image.width]
                .copy_from_slice(&rows[c * n * image.width..(c + 1) * n * image.width]);
        }
    }
    assert!(stacked == whole, "{}: the streamed bands decode to the whole frame's pixels", case.name);
    (cut.jpeg().to_vec(), stacked)
}

#[test]
fn every_photograph_decodes_to_another_libjpeg_turbos_pixels() {
    let dir = write_cases("reference");
    for case in read_cases(&dir) {
        let pic = photo::decode_picture(&case.jpeg).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let ours: Vec<u8> = if case.channels == 1 {
            assert!(pic.pixels.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]), "{}: grey decodes grey", case.name);
            pic.pixels.iter().step_by(3).copied().collect()
        } else {
            pic.pixels.clone()
        };
        assert_eq!(ours.len(), case.reference.len(), "{}: size", case.name);
        let differ = ours.iter().zip(&case.reference).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{}: {differ} bytes differ from simplejpeg's decoding", case.name);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn simd_and_forced_c_decode_and_encode_the_same_bits() {
    if let (Ok(dir), Ok(out)) = (std::env::var(CASES_ENV), std::env::var(DIGESTS_ENV)) {
        // The child: the parent below checks what it writes.
        std::fs::write(out, digests(&read_cases(Path::new(&dir))).join("\n")).expect("digests");
        return;
    }
    let dir = write_cases("simd");
    let simd = digests(&read_cases(&dir));
    let out = dir.join("forced-c.txt");
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["simd_and_forced_c_decode_and_encode_the_same_bits", "--exact", "--test-threads=1"])
        .env("JSIMD_FORCENONE", "1")
        .env(CASES_ENV, &dir)
        .env(DIGESTS_ENV, &out)
        .output()
        .expect("the child runs");
    assert!(child.status.success(), "the forced-C child failed: {}", String::from_utf8_lossy(&child.stdout));
    let forced_c: Vec<String> = std::fs::read_to_string(&out).expect("the child's digests").lines().map(str::to_string).collect();
    assert_eq!(forced_c.len(), simd.len());
    for (a, b) in simd.iter().zip(&forced_c) {
        assert_eq!(a, b, "SIMD (left) and forced C (right) differ");
    }
    let _ = std::fs::remove_dir_all(dir);
}
