//! The drain endpoint's credential: a secret the service draws at start
//! and writes to a file only its own user can read, and that the preStop
//! hook, running in the same container, reads and presents.
//!
//! Invariant: a drain request is honoured only when it presents this
//! process's secret. Which headers a request lacks cannot prove it came
//! from the pod itself: an edge on loopback (a sidecar, a node ingress, an
//! HTTP proxy in its default setup) may forward an outsider's request with
//! none of the headers anyone knows, or with one only its operator knows.
//! A secret that never leaves the container's file system can.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Random bytes in a token (256 bits).
const SECRET_BYTES: usize = 32;

/// The most bytes read from a token file (a token is 64 hex digits and a
/// newline; anything much larger is not a token file).
const MAX_FILE: u64 = 1024;

/// A per-process drain secret: 64 lowercase hex digits (256 random bits).
///
/// Its [`Debug`] form never shows the secret, and it has no `Display`.
///
/// ```
/// use ate_readiness::DrainToken;
///
/// # fn main() -> Result<(), ate_readiness::TokenError> {
/// let token = DrainToken::generate()?;
/// let dir = std::env::temp_dir().join(format!("ate-doc-token-{}", std::process::id()));
/// let published = token.publish(dir.join("drain.token"))?;
/// // The preStop hook's side:
/// let read = DrainToken::read(published.path())?;
/// assert!(token.matches(read.secret().as_bytes()));
/// drop(published); // removes the file
/// # std::fs::remove_dir(&dir).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct DrainToken {
    secret: String,
}

impl fmt::Debug for DrainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DrainToken(<redacted>)")
    }
}

/// Why a drain token could not be made, written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The operating system gave no random bytes.
    #[error("cannot draw a drain token: the operating system's random source failed: {0}")]
    Random(String),
    /// The token file could not be written.
    #[error(
        "cannot write the drain token to {path}: {source} (the directory must be writable \
         by the service; with a read-only root file system, mount an emptyDir there)"
    )]
    Write {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The token file could not be read.
    #[error(
        "cannot read the drain token at {path}: {source} (the service writes it at start; \
         the hook must run in the service's container, with the same path)"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a drain token (64 hex digits).
    #[error("{origin} does not hold a drain token (64 hexadecimal digits); it holds {len} bytes")]
    Malformed {
        /// Where the text came from (a file's path, or "the given text").
        origin: String,
        /// Its length in bytes (never the text itself).
        len: usize,
    },
}

impl DrainToken {
    /// Draws a new token from the operating system's random source.
    ///
    /// # Errors
    ///
    /// [`TokenError::Random`] when the random source fails.
    pub fn generate() -> Result<Self, TokenError> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
        let mut secret = String::with_capacity(SECRET_BYTES * 2);
        for b in bytes {
            secret.push(char::from(HEX[usize::from(b >> 4)]));
            secret.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Ok(Self { secret })
    }

    /// A token from its text (64 hex digits; surrounding white space is
    /// dropped), for a service that shares one from elsewhere.
    ///
    /// # Errors
    ///
    /// [`TokenError::Malformed`] for anything else.
    pub fn from_secret(text: &str) -> Result<Self, TokenError> {
        Self::parse(text, "the given text")
    }

    fn parse(text: &str, origin: &str) -> Result<Self, TokenError> {
        let t = text.trim();
        if t.len() == SECRET_BYTES * 2 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self {
                secret: t.to_ascii_lowercase(),
            })
        } else {
            Err(TokenError::Malformed {
                origin: origin.to_owned(),
                len: text.len(),
            })
        }
    }

    /// The secret, as the hook presents it (`Authorization: Bearer SECRET`).
    #[must_use]
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `presented` is this token. The comparison takes the same
    /// time wherever the first difference is.
    #[must_use]
    pub fn matches(&self, presented: &[u8]) -> bool {
        let mine = self.secret.as_bytes();
        if presented.len() != mine.len() {
            return false;
        }
        let diff = mine
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b.to_ascii_lowercase()));
        diff == 0
    }

    /// Where a service listening on `port` publishes its token unless told
    /// otherwise, and where [`DrainRequest`](crate::prestop::DrainRequest)
    /// looks for it: `ate-drain-PORT.token` in the system's temporary
    /// directory (`$TMPDIR`, else `/tmp`). An `exec` preStop hook runs in
    /// the service's container, so it sees the same file; another
    /// container of the pod (a sidecar) does not.
    #[must_use]
    pub fn default_path(port: u16) -> PathBuf {
        std::env::temp_dir().join(format!("ate-drain-{port}.token"))
    }

    /// Writes the token to `path`, readable and writable by the service's
    /// user only (mode 0600 on Unix), creating the directory if needed.
    /// The write is atomic (a new file renamed over the old one), so a
    /// hook never reads half a token. The file is removed when the
    /// returned [`PublishedToken`] is dropped.
    ///
    /// # Errors
    ///
    /// [`TokenError::Write`] when the directory or file cannot be written.
    pub fn publish(&self, path: impl Into<PathBuf>) -> Result<PublishedToken, TokenError> {
        let path = path.into();
        let fail = |source| TokenError::Write {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let written = (|| {
            let mut file = private_file(&tmp)?;
            file.write_all(self.secret.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        Ok(PublishedToken {
            path,
            token: self.clone(),
        })
    }

    /// Reads a token that [`publish`](Self::publish) wrote.
    ///
    /// # Errors
    ///
    /// [`TokenError::Read`] when the file cannot be read,
    /// [`TokenError::Malformed`] when it holds no token.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        use std::io::Read;
        let path = path.as_ref();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_FILE).read_to_string(&mut text))
            .map_err(|source| TokenError::Read {
                path: path.to_owned(),
                source,
            })?;
        Self::parse(&text, &path.display().to_string())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// A published token file; dropping it removes the file if it still
/// holds this token (a stopped service leaves no secret behind, and never
/// removes the file of a newer process that took over its port and path).
#[derive(Debug)]
#[must_use = "dropping the publication removes the token file at once"]
pub struct PublishedToken {
    path: PathBuf,
    token: DrainToken,
}

impl PublishedToken {
    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PublishedToken {
    fn drop(&mut self) {
        if DrainToken::read(&self.path).is_ok_and(|t| t == self.token) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The secret in an `Authorization` value `Bearer SECRET` (scheme in any
/// case, one or more spaces), or `None`.
pub(crate) fn bearer(value: &[u8]) -> Option<&[u8]> {
    let scheme = value.get(..7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let rest = &value[7..];
    let start = rest.iter().position(|&b| b != b' ')?;
    let token = &rest[start..];
    let end = token.iter().rposition(|&b| b != b' ')? + 1;
    Some(&token[..end])
}

#[cfg(test)]
mod tests {
    use super::{DrainToken, TokenError, bearer};

    #[test]
    fn two_tokens_differ_and_each_matches_only_itself() {
        let a = DrainToken::generate().unwrap();
        let b = DrainToken::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.secret().len(), 64);
        assert!(a.matches(a.secret().as_bytes()));
        assert!(a.matches(a.secret().to_ascii_uppercase().as_bytes()));
        assert!(!a.matches(b.secret().as_bytes()));
        assert!(!a.matches(&a.secret().as_bytes()[..63]));
        assert!(!a.matches(b""));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let a = DrainToken::generate().unwrap();
        assert!(!format!("{a:?}").contains(a.secret()));
    }

    #[test]
    fn only_64_hex_digits_are_a_token_and_errors_never_echo_the_text() {
        let e = DrainToken::from_secret("hunter2").unwrap_err();
        assert!(matches!(e, TokenError::Malformed { len: 7, .. }));
        assert!(!e.to_string().contains("hunter2"));
        assert!(DrainToken::from_secret(&"g".repeat(64)).is_err());
        assert!(DrainToken::from_secret(&format!(" {}\n", "a".repeat(64))).is_ok());
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer   abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_published_token_is_private_and_removed_with_its_publication() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ate-token-test-{}", std::process::id()));
        let path = dir.join("nested").join("drain.token");
        let token = DrainToken::generate().unwrap();
        let published = token.publish(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(DrainToken::read(&path).unwrap(), token);
        // A second publication replaces the first whole.
        let other = DrainToken::generate().unwrap();
        let again = other.publish(&path).unwrap();
        assert_eq!(DrainToken::read(&path).unwrap(), other);
        // The first publication no longer owns the file: its drop leaves
        // the newer token in place.
        drop(published);
        assert_eq!(DrainToken::read(&path).unwrap(), other);
        drop(again);
        assert!(!path.exists());
        let e = DrainToken::read(&path).unwrap_err();
        assert!(matches!(e, TokenError::Read { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
