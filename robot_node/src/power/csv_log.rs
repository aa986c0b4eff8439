//! [`CsvLog`]: the per-inference energy log (and optionally a per-reading log), one row per
//! `write` call, flushed, under a header an existing file must already carry.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use lop_power::PowerReading;

use super::error::{PowerNodeError, io};
use super::report::{EnergyReport, unix_s};

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// Opens `path` for appending under `header`: creates parent directories; a new or empty file
/// gets the header; an existing one must start with exactly that header.
fn open_csv(path: &Path, header: &str) -> Result<File, PowerNodeError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut file = OpenOptions::new().create(true).append(true).read(true).open(path).map_err(io(path))?;
    let len = file.metadata().map_err(io(path))?.len();
    if len == 0 {
        file.write_all(format!("{header}\n").as_bytes()).map_err(io(path))?;
        file.flush().map_err(io(path))?;
    } else {
        let mut first = String::new();
        BufReader::new(File::open(path).map_err(io(path))?).read_line(&mut first).map_err(io(path))?;
        if first.trim_end() != header {
            return Err(PowerNodeError::Config(format!(
                "{} exists with header '{}', not '{header}'; use another file",
                path.display(),
                first.trim_end()
            )));
        }
    }
    Ok(file)
}

/// The per-inference energy log (and optionally a per-reading log).
#[derive(Debug)]
pub struct CsvLog {
    path: PathBuf,
    file: File,
    rails: Vec<String>,
    samples: Option<(PathBuf, File)>,
}

impl CsvLog {
    /// The header row: `inference_id,start_unix_s,end_unix_s,duration_s,joules,avg_w,source,
    /// modelled,samples`, then `rail:<name>_j` per rail. Times are Unix seconds, energies joules,
    /// `avg_w` watts, `modelled` is `true` or `false`, `samples` the readings strictly inside the
    /// interval; numbers have 6 decimals.
    pub fn header(rails: &[String]) -> String {
        let mut cols: Vec<String> =
            ["inference_id", "start_unix_s", "end_unix_s", "duration_s", "joules", "avg_w", "source", "modelled", "samples"]
                .map(String::from)
                .to_vec();
        cols.extend(rails.iter().map(|r| csv_field(&format!("rail:{r}_j"))));
        cols.join(",")
    }

    /// The per-reading header: `unix_s,total_w,modelled`, then `rail:<name>_w` per rail.
    pub fn samples_header(rails: &[String]) -> String {
        let mut cols = vec!["unix_s".to_string(), "total_w".into(), "modelled".into()];
        cols.extend(rails.iter().map(|r| csv_field(&format!("rail:{r}_w"))));
        cols.join(",")
    }

    /// Opens (creating parent directories) or appends to the log at `path`.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`]; [`PowerNodeError::Config`] when the file exists with another header.
    pub fn create(path: impl AsRef<Path>, rails: &[String]) -> Result<CsvLog, PowerNodeError> {
        let path = path.as_ref();
        let file = open_csv(path, &CsvLog::header(rails))?;
        tracing::info!(path = %path.display(), "energy log open");
        Ok(CsvLog { path: path.to_path_buf(), file, rails: rails.to_vec(), samples: None })
    }

    /// Also logs every reading to `path` (see [`CsvLog::samples_header`]).
    ///
    /// # Errors
    /// As [`CsvLog::create`].
    pub fn with_samples(mut self, path: impl AsRef<Path>) -> Result<CsvLog, PowerNodeError> {
        let path = path.as_ref();
        let file = open_csv(path, &CsvLog::samples_header(&self.rails))?;
        self.samples = Some((path.to_path_buf(), file));
        Ok(self)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one inference's row and flushes it. Rails are matched by name; a rail the report
    /// lacks is left empty.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`].
    pub fn write(&mut self, r: &EnergyReport) -> Result<(), PowerNodeError> {
        let mut row = format!(
            "{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{}",
            r.id,
            unix_s(r.start),
            unix_s(r.end),
            r.duration_s(),
            r.joules,
            r.avg_w,
            csv_field(&r.source),
            r.modelled,
            r.samples
        );
        for rail in &self.rails {
            row.push(',');
            if let Some((_, j)) = r.rails_j.iter().find(|(n, _)| n == rail) {
                row.push_str(&format!("{j:.6}"));
            }
        }
        row.push('\n');
        self.file.write_all(row.as_bytes()).map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))
    }

    /// Appends one reading (stamped `at` on the wall clock) to the per-reading log, if any.
    ///
    /// # Errors
    /// [`PowerNodeError::Io`].
    pub fn write_sample(&mut self, at: SystemTime, r: &PowerReading) -> Result<(), PowerNodeError> {
        let Some((path, file)) = self.samples.as_mut() else {
            return Ok(());
        };
        let mut row = format!("{:.6},{:.6},{}", unix_s(at), r.total_w, r.modelled);
        for w in &r.rails_w {
            row.push_str(&format!(",{w:.6}"));
        }
        row.push('\n');
        file.write_all(row.as_bytes()).map_err(io(path))?;
        file.flush().map_err(io(path))
    }
}
