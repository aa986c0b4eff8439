//! Wire protocol tests: round trips, exact bytes, truncation, garbage, limits and a
//! deterministic fuzz of the decoder.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::time::Instant;

use lop_core::Rng;
use lop_msgs::protocol::{
    Band, BandHeader, Cancel, DType, Done, DoneStats, ErrorCode, ErrorFrame, Forward, Frame, HEADER_LEN, Hello, Limits, MAX_PATH,
    MAX_PROFILE_LEN, MAX_RANK, MAX_TEXT_LEN, Reject, RejectReason, Start, Welcome, check, decode, encode_band_header,
};
use lop_msgs::{Digest, Error};

fn band(inference_id: u64, rows: (u32, u32), shape: Vec<u32>, row_axis: u8, dtype: DType) -> Frame {
    let header =
        BandHeader { inference_id, tensor_id: 17, row_start: rows.0, row_end: rows.1, row_axis, dtype, shape, coding: Default::default() };
    let n: u64 = header.shape.iter().map(|&d| u64::from(d)).product::<u64>() * dtype.size();
    let payload = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    Frame::Band(Band { header, payload })
}

/// At least one frame of every kind, with edge values.
fn samples() -> Vec<Frame> {
    vec![
        Frame::Hello(Hello {
            robot_id: "jetson-01".into(),
            model_id: "resnet18".into(),
            model_sha256: Digest([1; 32]),
            robot_profile_hash: Digest([2; 32]),
            planner_hash: Digest([3; 32]),
            input_dtype: DType::U8,
            input_shape: vec![1, 3, 224, 224],
            robot_profile: br#"{"version": 3, "ops": []}"#.to_vec(),
        }),
        // Max rank, max dims, longest ids.
        Frame::Hello(Hello {
            robot_id: "r".repeat(64),
            model_id: "m".repeat(64),
            model_sha256: Digest([0xff; 32]),
            robot_profile_hash: Digest([0; 32]),
            planner_hash: Digest([0x80; 32]),
            input_dtype: DType::I64,
            input_shape: vec![u32::MAX; MAX_RANK],
            robot_profile: vec![0x5a; MAX_PROFILE_LEN],
        }),
        // Rank 0 (scalar) input.
        Frame::Hello(Hello {
            robot_id: "a".into(),
            model_id: "b".into(),
            model_sha256: Digest::default(),
            robot_profile_hash: Digest::default(),
            planner_hash: Digest::default(),
            input_dtype: DType::F32,
            input_shape: vec![],
            robot_profile: Vec::new(),
        }),
        Frame::Welcome(Welcome { server_profile_hash: Digest([9; 32]), table_hash: Digest([10; 32]), server_profile: Vec::new() }),
        Frame::Welcome(Welcome {
            server_profile_hash: Digest([9; 32]),
            table_hash: Digest([10; 32]),
            server_profile: br#"{"role":"server"}"#.to_vec(),
        }),
        Frame::Reject(Reject { reason: RejectReason::UnknownModel, text: "no model ab12".into(), server_profile: Vec::new() }),
        Frame::Reject(Reject { reason: RejectReason::Planning, text: String::new(), server_profile: br#"{"role":"server"}"#.to_vec() }),
        Frame::Reject(Reject { reason: RejectReason::Busy, text: "é".repeat(MAX_TEXT_LEN / 2), server_profile: Vec::new() }),
        Frame::Start(Start {
            inference_id: 0,
            bucket: 0,
            plan_hash: Digest::default(),
            input_stamp_ns: 0,
            deadline_ns: 0,
            due_ns: 0,
            path: Vec::new(),
        }),
        Frame::Start(Start {
            inference_id: u64::MAX,
            bucket: u32::MAX,
            plan_hash: Digest([0xee; 32]),
            input_stamp_ns: u64::MAX,
            deadline_ns: u64::MAX,
            due_ns: u64::MAX,
            path: (0..MAX_PATH).map(|i| format!("edge-{i}-{}", "x".repeat(50))).collect(),
        }),
        Frame::Start(Start {
            inference_id: 9,
            bucket: 1,
            plan_hash: Digest([1; 32]),
            input_stamp_ns: 2,
            deadline_ns: 3,
            due_ns: 2,
            path: vec!["edge-a".into()],
        }),
        band(5, (0, 4), vec![1, 3, 4, 5], 2, DType::U8),
        band(6, (100, 228), vec![1, 64, 128, 7], 2, DType::F32),
        band(u64::MAX, (u32::MAX - 1, u32::MAX), vec![1; MAX_RANK], 7, DType::F16),
        band(7, (3, 5), vec![2, 1, 1], 0, DType::BF16),
        // Zero-sized non-row dimension: an empty payload is allowed.
        band(8, (2, 4), vec![1, 0, 2, 3], 2, DType::I64),
        Frame::Done(Done { inference_id: 3, stats: DoneStats::default() }),
        Frame::Done(Done {
            inference_id: u64::MAX,
            stats: DoneStats {
                server_compute_ns: 1,
                server_wait_ns: 2,
                bytes_received: 3,
                bytes_sent: u64::MAX,
                bands_received: 5,
                bands_sent: u32::MAX,
                upload_ns: 6,
            },
        }),
        Frame::Error(ErrorFrame { inference_id: 4, code: ErrorCode::DeadlineExceeded, text: "late by 3 ms".into() }),
        Frame::Error(ErrorFrame { inference_id: 0, code: ErrorCode::Other, text: String::new() }),
        Frame::Error(ErrorFrame { inference_id: 1, code: ErrorCode::Internal, text: "x".repeat(MAX_TEXT_LEN) }),
        Frame::Error(ErrorFrame { inference_id: 2, code: ErrorCode::Late, text: "12 ms left".into() }),
        Frame::Forward(Forward { inference_id: 3, to: "edge-b".into(), path: vec!["edge-a".into()] }),
        Frame::Forward(Forward { inference_id: u64::MAX, to: "z".repeat(64), path: (0..MAX_PATH).map(|i| format!("e{i}")).collect() }),
        Frame::Cancel(Cancel { inference_id: 5 }),
        Frame::Cancel(Cancel { inference_id: u64::MAX }),
    ]
}

#[test]
fn every_kind_round_trips() {
    let mut kinds = std::collections::HashSet::new();
    for f in samples() {
        kinds.insert(f.kind() as u8);
        let bytes = f.encode().unwrap();
        assert_eq!(decode(&bytes).unwrap(), f);
        assert_eq!(check(&bytes).unwrap(), bytes.len());
        // encode_into appends.
        let mut buf = vec![0xaa, 0xbb];
        f.encode_into(&mut buf).unwrap();
        assert_eq!(&buf[2..], &bytes[..]);
        // Stream use: the frame followed by the next one.
        let mut two = bytes.clone();
        two.extend_from_slice(&bytes);
        let (g, used) = Limits::default().decode_prefix(&two).unwrap();
        assert_eq!((g, used), (f.clone(), bytes.len()));
        assert_eq!(decode(&two), Err(Error::TrailingBytes { extra: bytes.len() }));
        if let Frame::Band(b) = &f {
            let (h, payload) = Limits::default().decode_band(&bytes).unwrap();
            assert_eq!((&h, payload), (&b.header, &b.payload[..]));
            // Header + payload sent as two slices are the same bytes.
            let mut hdr = Vec::new();
            encode_band_header(&b.header, b.payload.len(), &mut hdr).unwrap();
            hdr.extend_from_slice(&b.payload);
            assert_eq!(hdr, bytes);
        }
    }
    assert_eq!(kinds.len(), 9);
}

#[test]
fn exact_wire_bytes_of_a_small_band() {
    let f = Frame::Band(Band {
        header: BandHeader {
            inference_id: 0x0102,
            tensor_id: 9,
            row_start: 4,
            row_end: 6,
            row_axis: 2,
            dtype: DType::U8,
            shape: vec![1, 1, 2, 1],
            coding: Default::default(),
        },
        payload: vec![0xaa, 0xbb],
    });
    #[rustfmt::skip]
    let expected: &[u8] = &[
        b'L', b'O', b'P', b'F', // magic
        7, 0,                   // version 7
        0x05,                   // kind Band
        0,                      // flags
        42, 0, 0, 0,            // body_len = 24 + 4*4 + 2
        0x02, 0x01, 0, 0, 0, 0, 0, 0, // inference_id
        9, 0, 0, 0,             // tensor_id
        4, 0, 0, 0,             // row_start
        6, 0, 0, 0,             // row_end
        2,                      // row_axis
        1,                      // dtype U8
        4,                      // rank
        0,                      // coding: raw elements
        1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, // shape
        0xaa, 0xbb,             // payload
    ];
    assert_eq!(f.encode().unwrap(), expected);
    assert_eq!(decode(expected).unwrap(), f);
}

#[test]
fn exact_wire_bytes_of_an_error_frame() {
    let f = Frame::Error(ErrorFrame { inference_id: 3, code: ErrorCode::OutOfPlan, text: "ab".into() });
    #[rustfmt::skip]
    let expected: &[u8] = &[
        b'L', b'O', b'P', b'F', 7, 0, 0x07, 0, 14, 0, 0, 0,
        3, 0, 0, 0, 0, 0, 0, 0, // inference_id
        4, 0,                   // code OutOfPlan
        2, 0, b'a', b'b',       // text
    ];
    assert_eq!(f.encode().unwrap(), expected);
}

#[test]
fn exact_wire_bytes_of_a_done_frame() {
    let stats = DoneStats {
        server_compute_ns: 1,
        server_wait_ns: 2,
        bytes_received: 3,
        bytes_sent: 4,
        bands_received: 5,
        bands_sent: 6,
        upload_ns: 0x0102_0304,
    };
    let f = Frame::Done(Done { inference_id: 9, stats });
    let mut expected = vec![b'L', b'O', b'P', b'F', 7, 0, 0x06, 0, 56, 0, 0, 0];
    for v in [9u64, 1, 2, 3, 4] {
        expected.extend_from_slice(&v.to_le_bytes());
    }
    expected.extend_from_slice(&[5, 0, 0, 0, 6, 0, 0, 0]);
    // Version 3: the upload as the edge saw it, last.
    expected.extend_from_slice(&[4, 3, 2, 1, 0, 0, 0, 0]);
    assert_eq!(f.encode().unwrap(), expected);
    assert_eq!(decode(&expected).unwrap(), f);
    // A version-2 Done (48 bytes of body) is too short.
    let mut v2 = expected[..HEADER_LEN + 48].to_vec();
    v2[8..12].copy_from_slice(&48u32.to_le_bytes());
    assert!(matches!(decode(&v2), Err(Error::BodyTooShort { field: "upload_ns", .. })), "{:?}", decode(&v2));
}

#[test]
fn every_prefix_is_incomplete() {
    for f in samples() {
        let bytes = f.encode().unwrap();
        for n in 0..bytes.len() {
            match decode(&bytes[..n]) {
                Err(Error::Incomplete { needed }) => assert!(needed > 0 && needed <= bytes.len() - n, "{f:?} at {n}: needed {needed}"),
                other => panic!("{:?} prefix {n}: {other:?}", f.kind()),
            }
            assert!(check(&bytes[..n]).unwrap_err().is_incomplete());
        }
    }
}

fn start_bytes() -> Vec<u8> {
    Frame::Start(Start {
        inference_id: 1,
        bucket: 2,
        plan_hash: Digest([3; 32]),
        input_stamp_ns: 4,
        deadline_ns: 5,
        due_ns: 0,
        path: Vec::new(),
    })
    .encode()
    .unwrap()
}

fn band_bytes() -> Vec<u8> {
    band(1, (4, 6), vec![1, 1, 2, 1], 2, DType::U8).encode().unwrap()
}

#[test]
fn header_errors() {
    let good = start_bytes();
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(decode(&b), Err(Error::BadMagic { .. })));
    // Garbage fails on the first byte, before a whole header is there.
    assert!(matches!(decode(b"G"), Err(Error::BadMagic { .. })));
    assert!(matches!(decode(b"GET / HTTP/1.1\r\n"), Err(Error::BadMagic { .. })));

    let mut b = good.clone();
    b[4] = 1;
    assert_eq!(decode(&b), Err(Error::UnsupportedVersion { found: 1, supported: 7 }));
    // The version is rejected as soon as it is there.
    assert_eq!(decode(&b[..6]), Err(Error::UnsupportedVersion { found: 1, supported: 7 }));
    let mut b = good.clone();
    b[5] = 1;
    assert_eq!(decode(&b), Err(Error::UnsupportedVersion { found: 0x0107, supported: 7 }));

    for kind in [0u8, 0x0a, 0x42, 0xff] {
        let mut b = good.clone();
        b[6] = kind;
        assert_eq!(decode(&b), Err(Error::UnknownKind { kind }));
    }
    let mut b = good.clone();
    b[7] = 1;
    assert_eq!(decode(&b), Err(Error::Reserved { field: "flags", value: 1 }));
}

#[test]
fn length_errors() {
    let good = start_bytes();
    // Declared body shorter than the fields: Start's body is 69 bytes (an empty path).
    let mut b = good.clone();
    b[8] = 67;
    b.truncate(b.len() - 2);
    assert!(matches!(decode(&b), Err(Error::BodyTooShort { field: "plan_hash", body_len: 67, .. })));
    // Declared body longer than the fields.
    let mut b = good.clone();
    b[8] = 70;
    b.push(0);
    assert!(matches!(decode(&b), Err(Error::BodyTooLong { extra: 1, .. })));
    // Bytes after the frame.
    let mut b = good.clone();
    b.extend_from_slice(&[0, 0, 0]);
    assert_eq!(decode(&b), Err(Error::TrailingBytes { extra: 3 }));
}

#[test]
fn oversized_frames_are_rejected_from_the_header() {
    let limits = Limits { max_frame_len: 1024 };
    let big = band(1, (0, 4), vec![1, 3, 4, 100], 2, DType::F32).encode().unwrap();
    assert!(big.len() > 1024);
    // Rejected with only the header present: no waiting for (or buffering) the body.
    assert_eq!(limits.check(&big[..HEADER_LEN]), Err(Error::TooLarge { len: big.len() as u64, limit: 1024 }));
    assert!(matches!(limits.decode(&big), Err(Error::TooLarge { .. })));
    assert!(decode(&big).is_ok());
    // A header claiming 4 GiB with the default limit.
    let mut b = start_bytes();
    b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(decode(&b), Err(Error::TooLarge { .. })));
    // Exactly at the limit is fine.
    let exact = Limits { max_frame_len: big.len() as u32 };
    assert!(exact.decode(&big).is_ok());
}

fn patch(mut b: Vec<u8>, body_off: usize, bytes: &[u8]) -> Vec<u8> {
    b[HEADER_LEN + body_off..HEADER_LEN + body_off + bytes.len()].copy_from_slice(bytes);
    b
}

#[test]
fn band_errors() {
    let good = band_bytes();
    assert!(decode(&good).is_ok());
    // Zero-row band (rows 4..4): rejected.
    assert_eq!(decode(&patch(good.clone(), 16, &4u32.to_le_bytes())), Err(Error::EmptyRows { start: 4, end: 4 }));
    // Inverted rows.
    assert_eq!(decode(&patch(good.clone(), 16, &3u32.to_le_bytes())), Err(Error::EmptyRows { start: 4, end: 3 }));
    // Rows do not match shape[row_axis] = 2.
    assert!(matches!(decode(&patch(good.clone(), 16, &7u32.to_le_bytes())), Err(Error::RowsMismatch { shape_rows: 2, .. })));
    // Row axis out of range.
    assert!(matches!(decode(&patch(good.clone(), 20, &[4])), Err(Error::RowAxis { row_axis: 4, .. })));
    // Unknown dtype.
    assert_eq!(decode(&patch(good.clone(), 21, &[0])), Err(Error::UnknownDType { code: 0 }));
    assert_eq!(decode(&patch(good.clone(), 21, &[99])), Err(Error::UnknownDType { code: 99 }));
    // Rank too large.
    assert!(matches!(decode(&patch(good.clone(), 22, &[9])), Err(Error::RankTooLarge { rank: 9, .. })));
    // Coding byte: unknown; coded (QOI) but without room for the digest and a unit byte; coded
    // but not uint8.
    assert_eq!(decode(&patch(good.clone(), 23, &[9])), Err(Error::UnknownCoding { code: 9 }));
    assert!(matches!(decode(&patch(good.clone(), 23, &[1])), Err(Error::PayloadSize { expected: 9, found: 2, .. })));
    assert!(matches!(decode(&patch(patch(good.clone(), 23, &[2]), 21, &[4])), Err(Error::CodedDtype { dtype: 4 })));
    // dtype F32 needs 8 bytes, 2 present.
    assert!(matches!(decode(&patch(good.clone(), 21, &[4])), Err(Error::PayloadSize { expected: 8, found: 2, .. })));
    // One payload byte more than the shape needs (body_len adjusted).
    let mut b = good.clone();
    b.push(0);
    let body_len = (b.len() - HEADER_LEN) as u32;
    b[8..12].copy_from_slice(&body_len.to_le_bytes());
    assert!(matches!(decode(&b), Err(Error::PayloadSize { expected: 2, found: 3, .. })));
    // Shape product overflowing u64: 8 dims of u32::MAX.
    let mut hdr = BandHeader {
        inference_id: 1,
        tensor_id: 1,
        row_start: 0,
        row_end: u32::MAX,
        row_axis: 0,
        dtype: DType::F32,
        shape: vec![u32::MAX; 8],
        coding: Default::default(),
    };
    let mut buf = Vec::new();
    assert!(matches!(encode_band_header(&hdr, 0, &mut buf), Err(Error::ShapeOverflow { .. })));
    assert!(buf.is_empty());
    // The same header on the wire (built by hand) decodes to the same error, without allocating.
    let mut raw = vec![b'L', b'O', b'P', b'F', 7, 0, 5, 0, 56, 0, 0, 0];
    raw.extend_from_slice(&1u64.to_le_bytes());
    raw.extend_from_slice(&1u32.to_le_bytes());
    raw.extend_from_slice(&0u32.to_le_bytes());
    raw.extend_from_slice(&u32::MAX.to_le_bytes());
    raw.extend_from_slice(&[0, 4, 8, 0]);
    for _ in 0..8 {
        raw.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    assert!(matches!(decode(&raw), Err(Error::ShapeOverflow { .. })));
    // A huge but representable shape: PayloadSize, not an allocation.
    hdr.shape = vec![u32::MAX, 1, 1, 1];
    raw[24 + HEADER_LEN..].iter_mut().for_each(|b| *b = 0);
    raw.truncate(HEADER_LEN + 24);
    raw[HEADER_LEN + 22] = 4;
    for d in &hdr.shape {
        raw.extend_from_slice(&d.to_le_bytes());
    }
    let body_len = (raw.len() - HEADER_LEN) as u32;
    raw[8..12].copy_from_slice(&body_len.to_le_bytes());
    assert!(matches!(decode(&raw), Err(Error::PayloadSize { expected, found: 0, .. }) if expected == u64::from(u32::MAX) * 4));
    // Encoding refuses the same mistakes.
    let Frame::Band(mut b) = band(1, (4, 6), vec![1, 1, 2, 1], 2, DType::U8) else { unreachable!() };
    b.header.row_end = 4;
    assert!(matches!(Frame::Band(b.clone()).encode(), Err(Error::EmptyRows { .. })));
    b.header.row_end = 6;
    b.payload.push(1);
    assert!(matches!(Frame::Band(b).encode(), Err(Error::PayloadSize { .. })));
    // decode_band refuses other kinds.
    assert!(matches!(Limits::default().decode_band(&start_bytes()), Err(Error::UnknownKind { kind: 4 })));
}

/// The profile a Hello carries: at most MAX_PROFILE_LEN bytes, both ways, and its length field
/// is checked against the body.
/// A forwarding path is bounded, names valid ids, and never names an edge twice; a Forward never
/// sends an inference back to an edge of its path. Both ends refuse what breaks this.
#[test]
fn forwarding_paths_cannot_loop_or_grow() {
    let start = |path: Vec<String>| {
        Frame::Start(Start { inference_id: 1, bucket: 0, plan_hash: Digest([2; 32]), input_stamp_ns: 0, deadline_ns: 9, due_ns: 0, path })
    };
    let ids = |n: usize| (0..n).map(|i| format!("e{i}")).collect::<Vec<_>>();
    assert_eq!(start(ids(MAX_PATH + 1)).encode(), Err(Error::PathTooLong { len: MAX_PATH + 1, max: MAX_PATH }));
    assert_eq!(start(vec!["a".into(), "b".into(), "a".into()]).encode(), Err(Error::ForwardLoop { to: "a".into() }));
    assert!(matches!(start(vec!["a/b".into()]).encode(), Err(Error::InvalidId { .. })));
    let fwd = |to: &str, path: Vec<String>| Frame::Forward(Forward { inference_id: 1, to: to.into(), path });
    assert_eq!(fwd("a", vec!["b".into(), "a".into()]).encode(), Err(Error::ForwardLoop { to: "a".into() }));
    assert!(matches!(fwd("", vec![]).encode(), Err(Error::InvalidId { .. })));

    // The same, written by hand past the encoder: the decoder refuses each.
    let valid = start(ids(2)).encode().unwrap();
    let path_at = HEADER_LEN + 68;
    assert_eq!(valid[path_at], 2);
    let mut long = valid.clone();
    long[path_at] = (MAX_PATH + 1) as u8;
    assert_eq!(decode(&long), Err(Error::PathTooLong { len: MAX_PATH + 1, max: MAX_PATH }));
    // "e1" -> "e0": the path names e0 twice.
    let mut twice = valid.clone();
    let last = twice.len() - 1;
    twice[last] = b'0';
    assert_eq!(decode(&twice), Err(Error::ForwardLoop { to: "e0".into() }));
    let mut back = fwd("e9", vec!["e8".into(), "e7".into()]).encode().unwrap();
    let last = back.len() - 1;
    back[last] = b'9';
    assert_eq!(decode(&back), Err(Error::ForwardLoop { to: "e9".into() }));
    // A version-1 Start (no path byte) is not a frame of this version.
    let mut v1 = valid[..path_at].to_vec();
    v1[8..12].copy_from_slice(&68u32.to_le_bytes());
    assert!(matches!(decode(&v1), Err(Error::BodyTooShort { field: "path length", .. })), "{:?}", decode(&v1));
}

#[test]
fn hello_profile_limits() {
    let hello = |n: usize| Hello {
        robot_id: "r".into(),
        model_id: "m".into(),
        model_sha256: Digest::default(),
        robot_profile_hash: Digest::default(),
        planner_hash: Digest::default(),
        input_dtype: DType::U8,
        input_shape: vec![1],
        robot_profile: vec![b'x'; n],
    };
    assert!(matches!(Frame::Hello(hello(MAX_PROFILE_LEN + 1)).encode(), Err(Error::TextTooLong { field: "robot_profile", .. })));
    let good = Frame::Hello(hello(3)).encode().unwrap();
    // The profile's u32 length sits 7 bytes before the end (4 + "xxx").
    let at = good.len() - HEADER_LEN - 7;
    let over = (MAX_PROFILE_LEN as u32 + 1).to_le_bytes();
    assert!(matches!(decode(&patch(good.clone(), at, &over)), Err(Error::TextTooLong { field: "robot_profile", .. })));
    assert!(matches!(decode(&patch(good.clone(), at, &4u32.to_le_bytes())), Err(Error::BodyTooShort { field: "robot_profile", .. })));
    assert!(matches!(decode(&patch(good, at, &2u32.to_le_bytes())), Err(Error::BodyTooLong { .. })));
}

#[test]
fn text_and_id_errors() {
    let f = Frame::Reject(Reject { reason: RejectReason::NoTable, text: "ab".into(), server_profile: Vec::new() });
    let good = f.encode().unwrap();
    // Non-UTF-8 text.
    assert_eq!(decode(&patch(good.clone(), 3, &[0xff, 0xfe])), Err(Error::NotUtf8 { field: "text" }));
    // Unknown reason.
    assert_eq!(decode(&patch(good.clone(), 0, &[77])), Err(Error::UnknownRejectReason { code: 77 }));
    // Text length beyond the body (the text, 2 bytes, and the empty profile's length, 4).
    assert!(matches!(decode(&patch(good.clone(), 1, &[7, 0])), Err(Error::BodyTooShort { field: "text", .. })));
    // A profile length beyond the body.
    assert!(matches!(decode(&patch(good.clone(), 5, &[1, 0, 0, 0])), Err(Error::BodyTooShort { field: "server_profile", .. })));
    // Text length above the maximum.
    let long = (MAX_TEXT_LEN as u16 + 1).to_le_bytes();
    assert!(matches!(decode(&patch(good.clone(), 1, &long)), Err(Error::TextTooLong { .. })));
    let e = Frame::Error(ErrorFrame { inference_id: 1, code: ErrorCode::Internal, text: "x".repeat(MAX_TEXT_LEN + 1) });
    assert!(matches!(e.encode(), Err(Error::TextTooLong { .. })));
    let e = Frame::Error(ErrorFrame { inference_id: 1, code: ErrorCode::Internal, text: String::new() }).encode().unwrap();
    assert_eq!(decode(&patch(e, 8, &[9, 9])), Err(Error::UnknownErrorCode { code: 0x0909 }));

    // Hello ids must be valid key chunks, on both sides.
    let Frame::Hello(mut h) = samples()[0].clone() else { unreachable!() };
    let good = Frame::Hello(h.clone()).encode().unwrap();
    let id_off = 98 + 4 * 4 + 2;
    assert!(matches!(decode(&patch(good.clone(), id_off, b"*")), Err(Error::InvalidId { .. })));
    assert!(matches!(decode(&patch(good.clone(), id_off, b"/")), Err(Error::InvalidId { .. })));
    assert!(matches!(decode(&patch(good, id_off - 2, &[0, 0])), Err(Error::InvalidId { .. }) | Err(Error::BodyTooLong { .. })));
    for bad in ["", "a/b", "edge", "x?", &"x".repeat(65)] {
        h.robot_id = bad.into();
        assert!(Frame::Hello(h.clone()).encode().is_err(), "{bad:?}");
    }
    h.robot_id = "ok".into();
    h.input_shape = vec![1; MAX_RANK + 1];
    assert!(matches!(Frame::Hello(h).encode(), Err(Error::RankTooLarge { .. })));
}

/// `n` random bytes from `rng` (the workspace's seeded generator, so the fuzz cases are the same
/// on every run).
fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// Decodes `b`; whatever decodes must re-encode to exactly `b` (the encoding is canonical).
/// Returns whether it decoded.
fn decode_checked(b: &[u8], limits: &Limits) -> bool {
    match limits.decode(b) {
        Ok(f) => {
            assert_eq!(f.encode().unwrap(), b, "{f:?}");
            true
        }
        Err(Error::Incomplete { needed }) => {
            assert!(needed > 0);
            false
        }
        Err(_) => false,
    }
}

#[test]
fn fuzz_random_bytes() {
    let t = Instant::now();
    let mut rng = Rng::new(0x1234_5678);
    let limits = Limits { max_frame_len: 1 << 16 };
    let mut accepted = 0;
    for i in 0..100_000 {
        let mut b = if i % 2 == 0 {
            let n = rng.below(96);
            bytes(&mut rng, n)
        } else {
            // A valid header with a random kind and a random body, so the body parsers are reached.
            let n = rng.below(160);
            let mut b = vec![b'L', b'O', b'P', b'F', 1, 0, rng.below(9) as u8, 0];
            b.extend_from_slice(&(n as u32).to_le_bytes());
            b.extend(bytes(&mut rng, n));
            b
        };
        if i % 7 == 0 {
            b.truncate(rng.below(b.len() + 1));
        }
        accepted += usize::from(decode_checked(&b, &limits));
        let _ = limits.decode_band(&b);
        let _ = limits.decode_prefix(&b);
    }
    eprintln!("fuzz_random_bytes: 100000 cases, {accepted} decoded, {:?}", t.elapsed());
}

#[test]
fn fuzz_mutated_frames() {
    let t = Instant::now();
    let mut rng = Rng::new(42);
    let valid: Vec<Vec<u8>> = samples().iter().filter_map(|f| f.encode().ok()).filter(|b| b.len() < 8192).collect();
    let limits = Limits { max_frame_len: 1 << 16 };
    let mut accepted = 0;
    for _ in 0..100_000 {
        let mut b = valid[rng.below(valid.len())].clone();
        for _ in 0..1 + rng.below(3) {
            let len = b.len();
            match rng.below(8) {
                0 if len > 0 => {
                    let i = rng.below(len);
                    b[i] ^= 1 << rng.below(8);
                }
                1 if len > 0 => {
                    let i = rng.below(len);
                    b[i] = rng.next_u64() as u8;
                }
                2 => b.truncate(rng.below(len + 1)),
                3 => {
                    let n = rng.below(8);
                    b.extend(bytes(&mut rng, n));
                }
                4 => {
                    let i = rng.below(len + 1);
                    b.insert(i, rng.next_u64() as u8);
                }
                5 if len > 0 => {
                    b.remove(rng.below(len));
                }
                6 if len >= HEADER_LEN => {
                    // A plausible or absurd body length.
                    let v = [
                        0u32,
                        1,
                        (len - HEADER_LEN) as u32 + 1,
                        (len - HEADER_LEN).saturating_sub(1) as u32,
                        u32::MAX,
                        rng.next_u64() as u32,
                    ];
                    b[8..12].copy_from_slice(&v[rng.below(v.len())].to_le_bytes());
                }
                _ if len >= 4 => {
                    // An edge value in a random aligned-or-not u32 slot (dims, rows, lengths).
                    let i = rng.below(len - 3);
                    let v = [0u32, 1, 2, 255, 256, 0xffff, u32::MAX, u32::MAX - 1][rng.below(8)];
                    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
                _ => {}
            }
        }
        accepted += usize::from(decode_checked(&b, &limits));
        let _ = limits.decode_band(&b);
        let _ = limits.decode_prefix(&b);
    }
    eprintln!("fuzz_mutated_frames: 100000 cases, {accepted} decoded, {:?}", t.elapsed());
}
