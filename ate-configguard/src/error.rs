//! The crate's error type, [`InputError`](crate::InputError).

/// Input the guard cannot use: the CLI exits 2. Messages name files,
/// documents, fields and key names, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// What the operating system said.
        message: String,
    },
    /// YAML/JSON that does not parse (duplicate keys included).
    #[error("cannot parse {file} at {location}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// Line and column.
        location: String,
        /// What is wrong (quoted spans redacted).
        message: String,
    },
    /// A document this tool does not understand.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: String,
        /// What is wrong.
        message: String,
    },
}

impl InputError {
    /// The CLI exit code for unusable input.
    pub const EXIT_CODE: i32 = 2;

    /// The same error, its message ending with `hint` (what to do).
    pub(crate) fn with_hint(self, hint: &str) -> Self {
        match self {
            Self::Io { path, message } => Self::Io {
                path,
                message: format!("{message}; {hint}"),
            },
            Self::Parse {
                file,
                location,
                message,
            } => Self::Parse {
                file,
                location,
                message: format!("{message}; {hint}"),
            },
            Self::Invalid { at, message } => Self::Invalid {
                at,
                message: format!("{message}; {hint}"),
            },
        }
    }
}
