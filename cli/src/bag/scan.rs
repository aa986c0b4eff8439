//! Reads a recording's MCAP files from start to end, record by record (the `mcap` crate's
//! sans-io linear reader: nothing is held but the record at hand, so a recording larger than
//! memory reads as well), notes every topic, picks the one the frames come from and hands its
//! messages on as recorded, with their header's stamp and frame id, in file order.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use mcap::McapError;
use mcap::records::{Channel, MessageHeader, Record};
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};

use super::zstd::Zstd;
use super::{BagError, COMPRESSED_IMAGE, IMAGE, Message, Recording, TopicInfo, cdr};

/// The longest record read, 1 GiB: more than any camera frame (a raw 8K RGBA frame is 133 MB),
/// and a cap on what a corrupt length can make the reader allocate.
const RECORD_LIMIT: usize = 1 << 30;

/// A channel of the file being read.
#[derive(Clone)]
struct ChannelOf {
    /// Its topic.
    topic: String,
    /// How its messages are serialised (`cdr` for ROS 2).
    encoding: String,
}

/// What the scan found so far.
struct Scan<'w> {
    /// The topic asked for, if any.
    wanted: Option<&'w str>,
    /// The topic the frames come from: the one asked for once its channel was seen, or the topic
    /// of the first image message.
    chosen: Option<String>,
    /// No topic was asked for, and a second image topic had messages: no more frames are handed
    /// on.
    several: bool,
    /// Every topic, by name.
    topics: BTreeMap<String, TopicInfo>,
    /// The current file's schemas (their ids are the file's own): type names.
    schemas: HashMap<u16, String>,
    /// The current file's channels.
    channels: HashMap<u16, ChannelOf>,
    /// First and last header stamps handed on.
    stamps: Option<(i64, i64)>,
    /// The last log time handed on, and how many went backwards.
    last_log: u64,
    out_of_order: usize,
}

/// See [`super::read_frames`].
pub(super) fn read<E: From<BagError>>(
    files: Vec<PathBuf>,
    wanted: Option<&str>,
    mut each: impl FnMut(Message) -> Result<(), E>,
) -> Result<Recording, E> {
    let mut scan = Scan {
        wanted,
        chosen: None,
        several: false,
        topics: BTreeMap::new(),
        schemas: HashMap::new(),
        channels: HashMap::new(),
        stamps: None,
        last_log: 0,
        out_of_order: 0,
    };
    for file in &files {
        scan.file(file, &mut each)?;
    }
    Ok(scan.finish(files)?)
}

/// A reader error as a [`BagError`] naming `path`.
fn mcap_error(path: &Path, e: McapError) -> BagError {
    let path = path.to_path_buf();
    match e {
        McapError::UnexpectedEof => BagError::Truncated { path },
        McapError::UnsupportedCompression(compression) => BagError::Compression { path, compression },
        McapError::BadMagic => BagError::Corrupt { path, why: "it does not start with MCAP's magic bytes".into() },
        other => BagError::Corrupt { path, why: other.to_string() },
    }
}

/// Reads into `buf` once, retrying an interrupted read; 0 at the end of the file.
fn read_some(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

impl Scan<'_> {
    /// Reads one file to its end.
    fn file<E: From<BagError>>(&mut self, path: &Path, each: &mut impl FnMut(Message) -> Result<(), E>) -> Result<(), E> {
        let read = |source| BagError::Read { path: path.to_path_buf(), source };
        let mut file = std::fs::File::open(path).map_err(read)?;
        if file.metadata().map_err(read)?.len() == 0 {
            return Err(BagError::Corrupt { path: path.to_path_buf(), why: "it is empty".into() }.into());
        }
        let options = LinearReaderOptions::default().with_validate_chunk_crcs(true).with_record_length_limit(RECORD_LIMIT);
        let mut reader = LinearReader::new_with_options(options);
        Zstd::new().and_then(|z| reader.add_decompressor(z)).map_err(|e| mcap_error(path, e))?;
        self.schemas.clear();
        self.channels.clear();
        while let Some(event) = reader.next_event() {
            match event.map_err(|e| mcap_error(path, e))? {
                LinearReadEvent::ReadRequest(n) => {
                    let got = read_some(&mut file, reader.insert(n)).map_err(read)?;
                    reader.notify_read(got);
                }
                LinearReadEvent::Record { opcode, data } => match mcap::parse_record(opcode, data).map_err(|e| mcap_error(path, e))? {
                    Record::Schema { header, .. } => {
                        self.schemas.insert(header.id, header.name);
                    }
                    Record::Channel(channel) => self.channel(channel)?,
                    Record::Message { header, data } => self.message(path, &header, &data, each)?,
                    _ => {}
                },
            }
        }
        Ok(())
    }

    /// Notes a channel's topic; checks the topic asked for when it is this one.
    fn channel(&mut self, c: Channel) -> Result<(), BagError> {
        let msg_type = self.schemas.get(&c.schema_id).cloned().unwrap_or_default();
        let info = self.topics.entry(c.topic.clone()).or_insert_with(|| TopicInfo { topic: c.topic.clone(), msg_type, messages: 0 });
        if self.wanted == Some(c.topic.as_str()) {
            if !info.is_image() {
                return Err(BagError::NotAnImage { topic: c.topic, msg_type: info.msg_type.clone() });
            }
            if c.message_encoding != "cdr" {
                return Err(BagError::NotCdr { topic: c.topic, encoding: c.message_encoding });
            }
            self.chosen = Some(c.topic.clone());
        }
        self.channels.insert(c.id, ChannelOf { topic: c.topic, encoding: c.message_encoding });
        Ok(())
    }

    /// With no topic asked for, picks the topic of the first image message; a second image
    /// topic with messages makes the choice the user's.
    fn pick(&mut self, channel: &ChannelOf) -> Result<(), BagError> {
        if self.chosen.is_none() {
            if channel.encoding != "cdr" {
                return Err(BagError::NotCdr { topic: channel.topic.clone(), encoding: channel.encoding.clone() });
            }
            self.chosen = Some(channel.topic.clone());
        } else if self.chosen.as_deref() != Some(channel.topic.as_str()) {
            self.several = true;
        }
        Ok(())
    }

    /// Counts a message, and hands it on with its header read when it is a frame of the chosen
    /// topic.
    fn message<E: From<BagError>>(
        &mut self,
        path: &Path,
        header: &MessageHeader,
        data: &[u8],
        each: &mut impl FnMut(Message) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(channel) = self.channels.get(&header.channel_id).cloned() else {
            let why = format!("a message on channel {} before that channel's record", header.channel_id);
            return Err(BagError::Corrupt { path: path.to_path_buf(), why }.into());
        };
        let Some(info) = self.topics.get_mut(&channel.topic) else { return Ok(()) };
        let (index, msg_type) = (info.messages, info.msg_type.clone());
        info.messages += 1;
        if self.wanted.is_none() && !self.several && (msg_type == IMAGE || msg_type == COMPRESSED_IMAGE) {
            self.pick(&channel)?;
        }
        if self.several || self.chosen.as_deref() != Some(channel.topic.as_str()) {
            return Ok(());
        }
        let (stamp_ns, frame_id) = cdr::header_of(data).map_err(|why| BagError::Message {
            topic: channel.topic.clone(),
            index,
            msg_type: msg_type.clone(),
            why,
        })?;
        self.stamps = Some(self.stamps.map_or((stamp_ns, stamp_ns), |(first, _)| (first, stamp_ns)));
        if header.log_time < self.last_log {
            self.out_of_order += 1;
        }
        self.last_log = header.log_time;
        each(Message { topic: channel.topic, index, msg_type, stamp_ns, frame_id, log_time_ns: header.log_time, cdr: data.to_vec() })
    }

    /// What was read, or why no frame was.
    fn finish(self, files: Vec<PathBuf>) -> Result<Recording, BagError> {
        let all = || self.topics.values().cloned().collect::<Vec<_>>();
        let images: Vec<TopicInfo> = self.topics.values().filter(|t| t.is_image()).cloned().collect();
        let with_frames: Vec<TopicInfo> = images.iter().filter(|t| t.messages > 0).cloned().collect();
        let topic = match self.wanted {
            Some(wanted) => {
                self.topics.get(wanted).cloned().ok_or_else(|| BagError::NoSuchTopic { topic: wanted.into(), topics: all() })?
            }
            None if with_frames.len() > 1 => return Err(BagError::SeveralImageTopics { topics: with_frames }),
            // The one with frames; else an empty one (an error below).
            None => with_frames.into_iter().chain(images).next().ok_or_else(|| BagError::NoImageTopic { topics: all() })?,
        };
        let Some(stamps_ns) = self.stamps else {
            return Err(BagError::EmptyTopic { topic: topic.topic, msg_type: topic.msg_type });
        };
        Ok(Recording { files, topic, stamps_ns, out_of_order: self.out_of_order })
    }
}
