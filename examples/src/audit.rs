//! The rate-limit audit trail: one JSON line per checked attempt, so that a
//! restarted service seeds its windows instead of handing every caller a
//! fresh burst.
//!
//! A line is `{"at_unix_ns": 1764400000000000000, "key": "alice", "limits":
//! ["notifications", "requests"]}`: when, who, and every limit the attempt
//! was checked against. Under `Policy::CountDenied` (the service's policy)
//! an attempt is recorded in every limit it touched, allowed or denied, so
//! the trail keeps every attempt too.
//!
//! Times are wall-clock: monotonic times do not outlive the process. At
//! startup [`Clock::at_wall_time`] places each record on the new limiters'
//! timeline, by its age.
//!
//! Each line is appended with one `write` on a file opened for appending,
//! without `fsync`: a killed process loses nothing, a machine crash may lose
//! the last few lines (the limits are then a little looser after it, never
//! stricter). A line that does not parse (a torn last line, say) is skipped
//! and counted in a startup warning. The file is rewritten with only the
//! records still inside a window at startup. While serving, an append never
//! reads the trail: once the file's oldest record has left every window, so
//! has everything before it, and the file becomes `<name>.prev` (replacing
//! the one before) while appends start a new file, a rename and an open.
//! The two files hold about two windows of traffic. (Compacting in place
//! re-read and rewrote the whole trail under the append lock: one request
//! in 100,000 took 97 ms in a release build, 730 ms in a debug one, and
//! every other request's append waited for it.)

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ate_ratelimit::{LimitId, LimitSet, clock::Clock};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// One checked attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Line {
    at_unix_ns: u64,
    key: String,
    limits: Vec<String>,
}

/// What [`Audit::open`] found in the trail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Attempts seeded into the limits.
    pub seeded: usize,
    /// Records no longer inside any window (dropped from the file).
    pub expired: usize,
    /// Lines that did not parse (dropped from the file).
    pub malformed: usize,
    /// Records a limit's full caller table refused (`ATE_MAX_CALLERS`):
    /// those callers start with a fresh window.
    pub refused: usize,
}

/// The open trail.
#[derive(Debug)]
pub struct Audit {
    path: PathBuf,
    /// Where the file goes once its oldest record left every window.
    previous: PathBuf,
    /// The longest window of the limits (older records are dropped).
    horizon: Duration,
    file: Mutex<Appender>,
}

#[derive(Debug)]
struct Appender {
    file: File,
    /// The oldest record in the file (Unix nanoseconds), if any.
    oldest: Option<u64>,
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Records at or before this time (Unix nanoseconds) are out of every
/// window at `wall_now`.
fn cutoff(horizon: Duration, wall_now: SystemTime) -> u64 {
    unix_ns(wall_now).saturating_sub(u64::try_from(horizon.as_nanos()).unwrap_or(u64::MAX))
}

/// `result`, with a file that is not there taken as done.
fn unless_missing(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn read_lines(path: &Path) -> std::io::Result<(Vec<Line>, usize)> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let (mut lines, mut malformed) = (Vec::new(), 0);
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Line>(&line) {
            Ok(l) => lines.push(l),
            Err(_) => malformed += 1,
        }
    }
    Ok((lines, malformed))
}

/// `<path>.prev`: the file before the current one.
fn previous_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".prev");
    PathBuf::from(name)
}

/// Replaces the file with `lines` (write a sibling, then rename over it, so
/// a crash leaves the old or the new file, never half of one), removing
/// `previous` just before the rename.
fn rewrite(path: &Path, lines: &[Line], previous: &Path) -> std::io::Result<()> {
    let tmp = path.with_extension("jsonl.tmp");
    let mut out = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut out, l).map_err(std::io::Error::other)?;
        out.push(b'\n');
    }
    let mut f = File::create(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    unless_missing(std::fs::remove_file(previous))?;
    std::fs::rename(&tmp, path)
}

fn append_mode(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl Audit {
    /// Opens (or creates) the trail at `path`, seeds `limits` from it, and
    /// rewrites it with only the records still inside a window.
    pub fn open(
        path: PathBuf,
        limits: &LimitSet<String>,
        ids: &[LimitId],
    ) -> std::io::Result<(Self, Loaded)> {
        let horizon = ids
            .iter()
            .map(|&id| limits.limiter(id).quota().window())
            .max()
            .unwrap_or_default();
        let by_name: HashMap<&str, LimitId> = ids.iter().map(|&id| (limits.name(id), id)).collect();
        let previous = previous_of(&path);
        let (mut lines, mut malformed) = read_lines(&previous)?;
        let (current, torn) = read_lines(&path)?;
        lines.extend(current);
        malformed += torn;
        let wall_now = SystemTime::now();
        let oldest = cutoff(horizon, wall_now);
        let mut loaded = Loaded {
            malformed,
            ..Loaded::default()
        };
        let mut per_limit: HashMap<LimitId, Vec<(String, ate_ratelimit::clock::Timestamp)>> =
            HashMap::new();
        let mut kept = Vec::new();
        for line in lines {
            if line.at_unix_ns <= oldest {
                loaded.expired += 1;
                continue;
            }
            let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(line.at_unix_ns);
            let ts = limits.clock().at_wall_time(at, wall_now);
            for name in &line.limits {
                // A limit this configuration no longer has: nothing to seed.
                if let Some(&id) = by_name.get(name.as_str()) {
                    per_limit
                        .entry(id)
                        .or_default()
                        .push((line.key.clone(), ts));
                }
            }
            loaded.seeded += 1;
            kept.push(line);
        }
        for (id, records) in per_limit {
            loaded.refused += limits.limiter(id).seed(records).refused();
        }
        // Once the rewrite is in place the previous file is a copy: remove
        // it first, so a crash in between loses records (looser limits)
        // rather than counting them twice (stricter ones).
        rewrite(&path, &kept, &previous)?;
        let file = append_mode(&path)?;
        let oldest = kept.iter().map(|l| l.at_unix_ns).min();
        Ok((
            Self {
                path,
                previous,
                horizon,
                file: Mutex::new(Appender { file, oldest }),
            },
            loaded,
        ))
    }

    /// Appends one attempt by `key` now, checked against `limits`.
    pub fn record(&self, key: &str, limits: &[&str]) -> std::io::Result<()> {
        self.record_at(key, limits, SystemTime::now())
    }

    /// [`record`](Self::record) at the wall-clock time `now`.
    pub fn record_at(&self, key: &str, limits: &[&str], now: SystemTime) -> std::io::Result<()> {
        let at = unix_ns(now);
        let line = Line {
            at_unix_ns: at,
            key: key.to_owned(),
            limits: limits.iter().map(|&l| l.to_owned()).collect(),
        };
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let mut a = self.file.lock();
        // Every record before the file's oldest (the previous file) is
        // older still: once that one has left every window, the previous
        // file is dropped, this one takes its place, and a new one starts.
        if a.oldest
            .is_some_and(|oldest| oldest <= cutoff(self.horizon, now))
        {
            // Missing: renamed by an earlier call whose open failed.
            unless_missing(std::fs::rename(&self.path, &self.previous))?;
            a.file = append_mode(&self.path)?;
            a.oldest = None;
        }
        // One write on an O_APPEND file: lines never interleave.
        a.file.write_all(&bytes)?;
        a.oldest = Some(a.oldest.map_or(at, |oldest| oldest.min(at)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use ate_ratelimit::{MonotonicClock, Policy, Quota};

    use super::*;

    fn limits() -> (LimitSet<String>, LimitId, LimitId) {
        let mut set = LimitSet::new(Policy::CountDenied, MonotonicClock::new());
        let a = set.add("a", Quota::per_minute(NonZeroU32::new(2).unwrap()));
        let b = set.add(
            "b",
            Quota::new(NonZeroU32::new(5).unwrap(), Duration::from_secs(600)).unwrap(),
        );
        (set, a, b)
    }

    fn line(secs_ago: u64, key: &str, limits: &[&str]) -> String {
        let at = unix_ns(SystemTime::now() - Duration::from_secs(secs_ago));
        serde_json::to_string(&Line {
            at_unix_ns: at,
            key: key.into(),
            limits: limits.iter().map(|&s| s.to_owned()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn a_trail_seeds_each_limit_and_keeps_only_records_inside_a_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let text = [
            line(30, "alice", &["a", "b"]),
            line(20, "alice", &["a", "b"]),
            line(120, "bob", &["a", "b"]), // out of a, inside b (10 min)
            line(700, "carol", &["b"]),    // out of every window
            "{\"torn".to_owned(),
            line(10, "dave", &["gone"]), // a limit no longer configured
        ]
        .join("\n");
        std::fs::write(&path, text).unwrap();
        let (set, a, b) = limits();
        let (_audit, loaded) = Audit::open(path.clone(), &set, &[a, b]).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                seeded: 4,
                expired: 1,
                malformed: 1,
                refused: 0
            }
        );
        let alice = "alice".to_owned();
        // Both of alice's attempts count in the minute: the oldest leaves
        // in just under 30 s.
        let wait = set.limiter(a).peek(&alice).retry_after().expect("denied");
        assert!(
            wait > Duration::from_secs(29) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        // A peek's `remaining` is the room left now (nothing is recorded).
        assert_eq!(set.limiter(b).peek(&alice).remaining(), 3);
        assert_eq!(set.limiter(b).peek("bob").remaining(), 4);
        assert_eq!(set.limiter(a).peek("bob").remaining(), 2);
        // The file now holds only the four records still inside a window.
        let (lines, malformed) = read_lines(&path).unwrap();
        assert_eq!((lines.len(), malformed), (4, 0));
    }

    #[test]
    fn records_append_and_are_read_back_by_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        {
            let (set, a, b) = limits();
            let (audit, loaded) = Audit::open(path.clone(), &set, &[a, b]).unwrap();
            assert_eq!(loaded, Loaded::default());
            for _ in 0..3 {
                let _ = set.check(&[a, b], "erin\n\"quoted\"");
                audit.record("erin\n\"quoted\"", &["a", "b"]).unwrap();
            }
        }
        let (set, a, b) = limits();
        let (_audit, loaded) = Audit::open(path, &set, &[a, b]).unwrap();
        assert_eq!(loaded.seeded, 3);
        let erin = "erin\n\"quoted\"".to_owned();
        assert!(!set.limiter(a).peek(&erin).is_allowed());
        assert_eq!(set.limiter(b).peek(&erin).remaining(), 2);
    }

    #[test]
    fn appends_never_rewrite_the_trail_it_rotates_once_its_oldest_record_left_every_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let prev = previous_of(&path);
        let (set, a, b) = limits(); // the longest window: 10 min
        let (audit, _) = Audit::open(path.clone(), &set, &[a, b]).unwrap();
        let t0 = SystemTime::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let keys = |p: &Path| -> Vec<String> {
            read_lines(p)
                .unwrap()
                .0
                .into_iter()
                .map(|l| l.key)
                .collect()
        };
        audit.record_at("r0", &["a"], at(0)).unwrap();
        audit.record_at("r1", &["a"], at(300)).unwrap();
        // r0 is exactly one window old: out of every window. The file
        // becomes the previous one (it still holds r1, inside the window).
        audit.record_at("r2", &["a"], at(600)).unwrap();
        assert_eq!(
            (keys(&prev), keys(&path)),
            (vec!["r0".into(), "r1".into()], vec!["r2".into()])
        );
        audit.record_at("r3", &["a"], at(1199)).unwrap();
        assert_eq!(keys(&path), ["r2", "r3"], "r2 is still inside a window");
        // r2 has left: so has all of the previous file, which is dropped.
        audit.record_at("r4", &["a"], at(1200)).unwrap();
        assert_eq!(
            (keys(&prev), keys(&path)),
            (vec!["r2".into(), "r3".into()], vec!["r4".into()])
        );
    }

    #[test]
    fn a_restart_seeds_from_both_files_and_leaves_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let prev = previous_of(&path);
        std::fs::write(
            &prev,
            [line(700, "old", &["b"]), line(50, "alice", &["a"])].join("\n"),
        )
        .unwrap();
        std::fs::write(
            &path,
            [line(40, "alice", &["a"]), "{\"torn".to_owned()].join("\n"),
        )
        .unwrap();
        let (set, a, b) = limits();
        let (audit, loaded) = Audit::open(path.clone(), &set, &[a, b]).unwrap();
        assert_eq!(
            loaded,
            Loaded {
                seeded: 2,
                expired: 1,
                malformed: 1,
                refused: 0
            }
        );
        // Both of alice's attempts count: the limit of 2 per minute is used.
        assert!(!set.limiter(a).peek("alice").is_allowed());
        assert!(!prev.exists(), "its records were copied into the trail");
        assert_eq!(read_lines(&path).unwrap().0.len(), 2);
        // The rotation clock starts at the oldest kept record (50 s ago).
        audit.record("bob", &["a"]).unwrap();
        assert!(!prev.exists());
        audit
            .record_at("bob", &["a"], SystemTime::now() + Duration::from_secs(551))
            .unwrap();
        assert_eq!(read_lines(&prev).unwrap().0.len(), 3);
    }
}
